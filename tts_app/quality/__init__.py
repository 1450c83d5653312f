"""Take quality: scores of a segment's or a clip's audio against its text and its voice, and the take policy.

* ``text``: CER (Chinese) / WER (other) of an ASR transcript, the same normalisation on both sides (pure).
* ``signal``: silence share, clipping, length per character, cut at the decode cap (numpy).
* ``asr``: speech recognisers (transformers' Whisper pipeline, CTranslate2 via faster-whisper).
* ``speaker``: speaker similarity (Resemblyzer's encoder).
* ``scorer``: ``TakeScorer`` -> ``TakeScores`` (all of the above for one take).
* ``policy``: the thresholds and the choice of the best take (pure).

The ``score`` command is ``tts_app.cli.score``; the engine's use is ``tts_app.engine.takes``.
"""
