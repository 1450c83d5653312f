"""tts_app.ui"""
