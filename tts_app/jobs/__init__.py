"""JSONL batch jobs: schema + streaming validation (``schema``), the runner (``runner``), the writing side
(``results``: results.jsonl in line order, WAVs, ZIP), durable job folders (``store``), the server's background jobs
(``manager``), ``python -m tts_app batch`` (``cli``). The UI and the CLI use the same calls::

    report = validate_job("tasks.jsonl", audio_dir="voices.zip")        # no model; report.as_table()
    summary = run_job("tasks.jsonl", "out/", engine, resume=True, progress=cb, cancel_event=ev)
    zip_path = make_results_zip("out/")                                  # results.jsonl + ok audio
"""

from tts_app.jobs.results import make_results_zip, read_results
from tts_app.jobs.runner import JobSummary, run_job, validate_job
from tts_app.jobs.schema import JobConfig, ValidationReport, ValidationRow

__all__ = ["JobConfig", "JobSummary", "ValidationReport", "ValidationRow", "make_results_zip", "read_results",
           "run_job", "validate_job"]
