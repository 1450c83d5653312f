"""tts_app.frontend"""
