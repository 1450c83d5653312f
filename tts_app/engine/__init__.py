"""The batch engine: input (request -> segments, caller's thread), front (``Engine``: submit, cancel, stats,
lifecycle), core (``EngineCore``: the model worker's one schedule -> execute -> update loop), executor (a step's
device work -> plain outcomes), state (per-request and per-segment state), scheduler + plans (plain data), memory
(probe, estimate, OOM detection), output (chunks, join, tempo, loudness, callbacks, on its own threads), handle (what
callers hold).

    from tts_app.engine import Engine
    engine = Engine(adapter, EngineConfig(...)).start()
    handle = engine.submit(request, on_progress=callback)
    result = handle.result()          # SynthesisResult; why it ended: result.finish (tts_app.finish)
"""

from tts_app.engine.front import Engine
from tts_app.engine.handle import EngineStats, ProgressEvent, RequestHandle
from tts_app.engine.memory import MemoryEstimator, MemoryProbe, is_out_of_memory, parse_size
from tts_app.engine.scheduler import BatchCap, SchedulePlan, Scheduler, SegmentWork

__all__ = [
    "BatchCap", "Engine", "EngineStats", "MemoryEstimator", "MemoryProbe", "ProgressEvent", "RequestHandle",
    "SchedulePlan", "Scheduler", "SegmentWork", "is_out_of_memory", "parse_size",
]
