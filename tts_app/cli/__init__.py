"""tts_app.cli"""
