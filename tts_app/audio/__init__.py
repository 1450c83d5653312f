"""tts_app.audio"""
