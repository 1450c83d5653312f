"""tts_app: zero-shot voice-cloning text-to-speech engine and Gradio app.

Data flows one way: UI / CLI -> SynthesisRequest -> scheduler -> engine -> model adapter -> post-processing -> outputs.
Nothing heavy is imported here: ``import tts_app`` must stay cheap (no torch, no gradio).
"""

__version__ = "0.1.0"
