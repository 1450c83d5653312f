"""tts_app.engine"""
