"""The batch engine: input (request -> segments, caller's thread), scheduler + plans (plain data), memory (probe,
estimate, OOM detection), core (the model worker's loop), output (chunks, join, tempo, loudness, callbacks, on its
own threads), handle (what callers hold).

    from tts_app.engine import Engine
    engine = Engine(adapter, EngineConfig(...)).start()
    handle = engine.submit(request, on_progress=callback)
    result = handle.result()          # SynthesisResult; why it ended: result.finish (tts_app.finish)
"""

from tts_app.engine.core import Engine
from tts_app.engine.handle import EngineStats, ProgressEvent, RequestHandle
from tts_app.engine.memory import MemoryEstimator, MemoryProbe, is_out_of_memory, parse_size
from tts_app.engine.scheduler import BatchCap, SchedulePlan, Scheduler, SegmentWork

__all__ = [
    "BatchCap", "Engine", "EngineStats", "MemoryEstimator", "MemoryProbe", "ProgressEvent", "RequestHandle",
    "SchedulePlan", "Scheduler", "SegmentWork", "is_out_of_memory", "parse_size",
]
