"""tts_app.jobs"""
