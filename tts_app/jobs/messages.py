"""Messages of JSONL jobs (validation, per-line errors and warnings, the run's summary), in English and Chinese.

Keys ``job_*``, registered with ``tts_app.frontend.messages``: a job module raises or records
``Notice("job_...", **params)``, an English ``str`` that results.jsonl stores as before (with its ``*_i18n`` twin,
``tts_app.jobs.results.line_record``), and that the page, the CLI and the progress text render in their user's
language. JSON field names (``prompt_audio``, ``output_name``, ...) stay as written in both languages: they are
what the user types.
"""

from __future__ import annotations

from tts_app.frontend.messages import Notice, register

EN: dict[str, str] = {
    # the job file
    "job_cannot_read": "cannot read job file {name!r}: {reason}",
    "job_gbk": "the file is not UTF-8 ({where}); read it as GB18030/GBK. Save it as UTF-8 to be sure the text is "
               "read as you wrote it",
    "job_not_utf8": "job file {name!r} is not UTF-8 text ({where}) and not GBK/GB18030 either; save it as UTF-8",
    "job_bad_byte": "bad byte 0x{byte} near line {line}",
    "job_no_lines": "the job file has no lines; write one JSON object per line",
    "job_file_no_lines": "job file {name!r} has no lines; write one JSON object per line",
    "job_not_found_no_zip": "{count} line(s) name reference audio that is not next to the job file, and no audio ZIP "
                            "or folder was given: add the ZIP (or folder) holding the files named in prompt_audio "
                            "(web app: the reference audio ZIP box; command line: --audio-dir)",
    "job_default_voice_missing": "default voice file {path!r} does not exist",
    "job_audio_dir_bad": "audio folder {name!r} is neither a folder nor a ZIP file",
    # where files are looked for
    "job_root_job_folder": "the job file's folder",
    "job_root_audio_folder": "the audio folder",
    "job_root_audio_zip": "the audio ZIP {name!r}",
    "job_root_the_zip": "the audio ZIP",
    # prompt_audio
    "job_ctrl_newline": "a newline", "job_ctrl_tab": "a tab", "job_ctrl_return": "a carriage return",
    "job_ctrl_backspace": "a backspace", "job_ctrl_formfeed": "a form feed",
    "job_control_chars": "prompt_audio {value!r} contains control characters ({names}): in JSON a backslash starts "
                         "an escape (\\n is a newline, \\t a tab), so write paths with forward slashes, e.g. {fixed!r}",
    "job_windows_path": "prompt_audio {value!r} is a Windows absolute path; give a path relative to the JSONL file "
                        "or the audio folder",
    "job_outside_roots": "prompt_audio {value!r} is an absolute path outside the allowed folders ({roots}); give a "
                         "path relative to the JSONL file or the audio folder",
    "job_audio_missing": "prompt_audio file {value!r} does not exist",
    "job_leaves_zip": "prompt_audio {value!r} leaves the audio ZIP; use a path inside it",
    "job_leaves_roots": "prompt_audio {value!r} leaves the allowed folders ({roots}); use a path inside the JSONL's "
                        "folder or the audio folder",
    "job_did_you_mean": "prompt_audio file {value!r} not found; did you mean {near!r}? (letter case matters in file "
                        "names here)",
    "job_not_found": "prompt_audio file {value!r} not found (looked in {looked})",
    "job_not_found_no_source": "prompt_audio file {value!r} not found (looked in {looked}; no audio ZIP or folder "
                               "was given)",
    "job_not_audio": "prompt_audio {value!r} is not audio (the file is {what}); give a WAV, FLAC, MP3, OGG or M4A "
                     "recording",
    "job_too_short": "prompt_audio {value!r} is only {duration_s:.2f} s long; a reference needs at least {min_s:g} s "
                     "of speech (5-15 s works best)",
    "job_unreadable": "prompt_audio {value!r} cannot be read: {reason}",
    "job_zip_unreadable": "prompt_audio {value!r} cannot be read from the audio ZIP: {reason}",
    # the audio ZIP
    "job_zip_too_many": "audio ZIP has {count} files; at most {limit} are accepted",
    "job_zip_too_big": "audio ZIP would unpack to {size} bytes; the limit is {limit} bytes",
    "job_zip_outside": "audio ZIP member {member!r} points outside the archive folder; refusing the ZIP (re-create "
                       "it with plain relative names)",
    "job_zip_symlink": "audio ZIP member {member!r} is a symbolic link; refusing the ZIP",
    "job_zip_unreadable_file": "audio archive {name!r} is not a readable ZIP file: {reason}",
    "job_zip_grew": "audio ZIP unpacks to more than {limit} bytes; refusing it",
    "job_zip_ratio": "audio ZIP member {member!r} would unpack to {ratio:.0f} times its packed size (at most {limit:.0f} "
                     "times is accepted: audio barely compresses, so this looks like a ZIP bomb); refusing the ZIP",
    # output_name
    "job_name_type": "output_name must be a string, not {type}",
    "job_name_path": "output_name {value!r} contains a path; outputs always go in the output folder, give a plain "
                     "file name such as {plain!r}",
    "job_name_empty_after": "output_name {value!r} is empty after removing unsafe characters",
    "job_name_too_long": "output_name is {size} bytes long; at most {limit} bytes",
    "job_renamed": "output_name {value!r} was renamed to {name!r} (the original is not a safe file name on every "
                   "system); the audio is {file!r}",
    "job_name_empty": "output_name is empty; the line number and first words are used instead, so the audio is "
                      "{file!r}",
    "job_duplicate_name": "duplicate output_name {name!r}: line {first} already uses it (lines {first} and {line}); "
                          "give each line its own output_name",
    # fields and values
    "job_bad_json": "bad JSON: {detail} at column {column}",
    "job_bad_json_backslash": "bad JSON: {detail} at column {column}; a backslash in a path must be doubled (\\\\) "
                              "or, better, written as a forward slash",
    "job_line_too_long": "the line is {num_chars} characters; at most {max_chars}",
    "job_json_number": "bad JSON: a number of {num_chars} digits; at most {max_chars} characters per number",
    "job_json_depth": "bad JSON: objects and lists nest {depth} deep; at most {max_depth}",
    "job_bad_json_other": "bad JSON: {detail}",
    "job_json_nested": "bad JSON: nested too deeply; at most {max_depth} levels",
    "job_not_object": "expected a JSON object {{...}}, got {type}",
    # the json module's own wording of a parse error (``JSON_ERRORS``)
    "job_json_expecting_value": "Expecting value",
    "job_json_property_name": "Expecting property name enclosed in double quotes",
    "job_json_comma": "Expecting ',' delimiter",
    "job_json_colon": "Expecting ':' delimiter",
    "job_json_unterminated": "Unterminated string starting at",
    "job_json_extra_data": "Extra data",
    "job_json_bad_escape": "Invalid \\escape",
    "job_json_control_char": "Invalid control character at",
    "job_unknown_field": "unknown field {field!r} ignored",
    "job_both_given": "both {first!r} and {second!r} are given with different values; keep one",
    "job_same_field_twice": "{theirs!r} (GLM-TTS's name) and {ours!r} (ours) are the same field; keep one",
    "job_mixed_formats": "the line mixes GLM-TTS's field names ({theirs}) with ours ({ours}); write it in one "
                         "format: uttid + prompt_text + prompt_speech + syn_text (GLM-TTS), or output_name + "
                         "prompt_text + prompt_audio + input_text",
    "job_missing_theirs": "missing field {field!r} ({meaning}; the line uses GLM-TTS's field names, "
                          "which need uttid, prompt_text, prompt_speech and syn_text)",
    "job_audio_found_as": "{field} {value!r} was read as {found!r} in {root} (a path written from the folder above, "
                          "as GLM-TTS's examples are); write {found!r} to silence this",
    "job_missing_near": "missing field {field!r} (found {near!r}; rename it to {field})",
    "job_missing": "missing field {field!r} ({meaning})",
    "job_missing_no_default": "{missing} and no default voice was given",
    "job_meaning_text": "the text to speak",
    "job_meaning_audio": "the reference audio file",
    "job_text_empty": "'input_text' must be a non-empty string",
    "job_prompt_text_type": "'prompt_text' must be a string",
    "job_voice_type": "'voice' must be the name of a saved voice (a non-empty string)",
    "job_voice_and_audio": "both 'voice' and 'prompt_audio' are given; keep one",
    "job_voice_unknown": "voice {voice!r} is not in the voice library (voices: {names}); save it first, check the "
                         "spelling, or give prompt_audio",
    "job_none": "none",
    "job_audio_type": "'prompt_audio' must be a file path string",
    "job_param_list": "{name}={value!r} must be a list of numbers of seconds, one per line of the text, e.g. "
                      "[2.5, 1.8]",
    "job_param_bool": "{name}={value!r} must be true/false",
    "job_param_int": "{name}={value!r} must be int",
    "job_param_float": "{name}={value!r} must be float",
    "job_param_finite": "{name}={value!r} must be a finite number",
    "job_format_unknown": "format {value!r} is unknown; use one of {allowed} (or leave it out for the job's format)",
    # emotion fields
    "job_emo_audio_type": "'emo_audio_prompt' must be a file path string",
    "job_emo_unknown": "'emo_vector' has unknown emotions {unknown}; use {allowed}",
    "job_emo_vector": "'emo_vector' must be a list of {count} numbers or an object of emotion weights, e.g. "
                      "{{\"happy\": 0.8}}",
    "job_emo_alpha": "'emo_alpha' must be a number in [0, 1]",
    "job_emo_use_text": "'use_emo_text' must be true/false",
    "job_emo_text_type": "'emo_text' must be a string",
    "job_emo_text_alone": "'emo_text' is only read with \"use_emo_text\": true; add it or drop emo_text",
    # dialogue lines
    "job_script_list": "'script' as a list holds objects with 'speaker' and 'text'",
    "job_script_empty": "'script' must be a non-empty dialogue text ('Speaker 1: ...' lines)",
    "job_script_clash": "both 'script' and {field!r} are given; a dialogue takes its voices from 'speakers'",
    "job_script_speakers": "a 'script' needs 'speakers': {{\"1\": \"voice name or audio file\", ...}}",
    "job_speaker_voice": "speakers: {label}'s voice must be a voice name or a file path",
    # running
    "job_ignored_knob": "{name} ignored: the {family} model has no such setting ({source})",
    "job_cancelled": "cancelled",
    "job_cancelled_before_start": "cancelled before it ran",
    "job_no_audio": "no audio produced",
    "job_internal_error": "internal error: {error}",
    "job_failed": "failed",
    "job_write_failed": "its audio could not be written ({name}: {reason}); free disk space and resume the job to "
                        "run this line again",
    "job_stopped_write": "the job stopped: its results could not be written ({reason}); {num_recorded} of "
                         "{num_lines} lines are recorded. Free disk space and resume the job: lines done are kept, "
                         "the rest run again",
    # texts of the validation report and the run summary (CLI)
    "job_validation_head": "{path}: {num_lines} lines, {num_valid} valid, {num_invalid} invalid, {num_warnings} "
                           "warnings (encoding {encoding})",
    "job_validation_row": "  {where}: {status}: {message}",
    "job_job_file": "job file",
    "job_line": "line {line}",
    "job_row_error": "error",
    "job_row_warning": "warning",
    "job_summary": "{num_lines} lines: {num_ok} ok, {num_failed} failed, {num_skipped} skipped (already done)"
                   "{cancelled} in {elapsed_s:.1f} s; results in {path}",
    "job_summary_cancelled": ", {count} cancelled",
    "job_failed_line": "  line {line}: {message}",
    # Ray workers (tts_app.jobs.cluster): errors, progress lines, worker events, a line's failure
    "job_ray_missing": "--ray needs Ray, which is not installed; install it with `python3 -m pip install -r "
                       "{requirements}` (the version tested with this app), or run without --ray",
    "job_ray_start_failed": "could not start a Ray cluster on this machine: {error}",
    "job_ray_unreachable": "cannot reach a Ray cluster at {address!r}: {error}; {hint}, or use --ray local",
    "job_ray_hint_auto": "start one with `ray start --head` on this machine",
    "job_ray_hint_address": "check that `ray start --head` runs there and that {address} is its address (`ray "
                            "status` on the head node prints it)",
    "job_ray_join_failed": "cannot join the Ray cluster at {address!r}: {error}",
    "job_ray_device_index": "--device {device} cannot be used with --ray: Ray gives each worker its own GPUs "
                            "(--gpus-per-worker); use --device auto or cuda",
    "job_ray_cuda_no_gpus": "--device cuda needs --gpus-per-worker above 0 (the cluster has {cluster_gpus:g} GPUs)",
    "job_ray_cpu_with_gpus": "--device cpu with --gpus-per-worker {gpus:g}: the GPUs would sit idle; drop one of them",
    "job_ray_no_gpu_worker": "each worker needs {gpus:g} GPU but the cluster has {cluster_gpus:g}; use "
                             "--gpus-per-worker 0 (or --device cpu) to run on CPUs, or add GPU machines with "
                             "`ray start --address=HEAD:6379`",
    "job_ray_too_few_gpus": "{workers} worker(s) x {gpus:g} GPU need {needed:g} GPUs but the cluster has "
                            "{cluster_gpus:g}; lower --num-workers or --gpus-per-worker (fractions share a GPU), or "
                            "add GPU machines with `ray start --address=HEAD:6379`",
    "job_ray_too_few_cpus": "{workers} worker(s) x {cpus:g} CPU need {needed:g} CPUs but the cluster has "
                            "{cluster_cpus:g}; lower --num-workers or --cpus-per-worker",
    "job_ray_not_ready": "worker(s) {workers} did not get ready within {timeout_s:g} s (placed and model loaded); "
                         "check `ray status` for free resources, or raise the timeout",
    "job_ray_worker_start_failed": "worker {n} failed to start: {error}",
    "job_ray_worker_load_failed": "worker {n} could not load the model: {error}",
    "job_ray_cluster": "Ray cluster: {nodes} node(s), {cpus:g} CPUs, {gpus:g} GPUs; starting {workers} worker(s) "
                       "with {gpus_per_worker:g} GPU and {cpus_per_worker:g} CPU each",
    "job_ray_worker_ready": "worker {n} ready: {family} on {device}{gpu_ids}, node {node}, pid {pid}",
    "job_ray_gpu_ids": " (GPU {ids})",
    "job_ray_worker_stopped": "worker {n} (pid {pid} on {node}) stopped: {error}; its lines go to the other workers",
    "job_ray_worker_back": "worker {n} is back",
    "job_ray_worker_gone": "worker {n} is gone ({error})",
    "job_ray_not_back": "not back within {timeout_s:g} s",
    "job_ray_no_answer": "no answer within {timeout_s:g} s (busy loading or swapping?)",
    "job_ray_no_worker_for_voice": "no Ray worker is up to check the default voice",
    "job_ray_no_worker_left": "no Ray worker is left to run it (all {count} stopped); rerun with --resume once the "
                              "cluster is back",
    "job_ray_internal_error": "internal error on a Ray worker: {error}",
    "job_ray_line_worker_stopped": "the Ray worker running it stopped {count} time(s) (last: {error})",
    "job_ray_ran_on": "ran on {count} Ray worker(s)",
    "job_ray_retried": "; {count} line(s) sent to another worker after theirs stopped",
    # the batch command's progress and its Ctrl-C
    "job_progress_unit": "line",
    "job_count_ok": "ok", "job_count_failed": "failed", "job_count_cancelled": "cancelled",
    "job_count_skipped": "skipped",
    "job_no_model_needed": "no line needs the model (every line is invalid or already done); not loading it",
    "job_cancelling": "cancelling: lines already running finish, the rest are recorded as cancelled (Ctrl-C again "
                      "to stop at once)",
    "job_interrupted": "interrupted; finished lines are kept, rerun with --resume to continue",
    "job_cancelled_resume": "cancelled; rerun with --resume to finish the lines not done",
}

ZH: dict[str, str] = {
    "job_cannot_read": "无法读取任务文件 {name!r}：{reason}",
    "job_gbk": "文件不是 UTF-8 编码（{where}）；已按 GB18030/GBK 读取。请另存为 UTF-8，以确保文本按原样读取",
    "job_not_utf8": "任务文件 {name!r} 既不是 UTF-8 文本（{where}），也不是 GBK/GB18030；请另存为 UTF-8",
    "job_bad_byte": "第 {line} 行附近有无效字节 0x{byte}",
    "job_no_lines": "任务文件没有任何行；请每行写一个 JSON 对象",
    "job_file_no_lines": "任务文件 {name!r} 没有任何行；请每行写一个 JSON 对象",
    "job_not_found_no_zip": "{count} 行引用的参考音频不在任务文件旁边，也没有提供音频 ZIP 或文件夹：请添加包含 prompt_audio "
                            "所列文件的 ZIP（或文件夹）（网页：参考音频 ZIP 框；命令行：--audio-dir）",
    "job_default_voice_missing": "默认声音文件 {path!r} 不存在",
    "job_audio_dir_bad": "音频目录 {name!r} 既不是文件夹也不是 ZIP 文件",
    "job_root_job_folder": "任务文件所在文件夹",
    "job_root_audio_folder": "音频文件夹",
    "job_root_audio_zip": "音频 ZIP {name!r}",
    "job_root_the_zip": "音频 ZIP",
    "job_ctrl_newline": "换行符", "job_ctrl_tab": "制表符", "job_ctrl_return": "回车符",
    "job_ctrl_backspace": "退格符", "job_ctrl_formfeed": "换页符",
    "job_control_chars": "prompt_audio {value!r} 含有控制字符（{names}）：JSON 中反斜杠表示转义（\\n 是换行，\\t 是制表符），"
                         "所以路径请用正斜杠，例如 {fixed!r}",
    "job_windows_path": "prompt_audio {value!r} 是 Windows 绝对路径；请给出相对于 JSONL 文件或音频文件夹的路径",
    "job_outside_roots": "prompt_audio {value!r} 是允许的文件夹（{roots}）之外的绝对路径；请给出相对于 JSONL 文件或音频文件夹的路径",
    "job_audio_missing": "prompt_audio 文件 {value!r} 不存在",
    "job_leaves_zip": "prompt_audio {value!r} 指向音频 ZIP 之外；请使用 ZIP 内的路径",
    "job_leaves_roots": "prompt_audio {value!r} 指向允许的文件夹（{roots}）之外；请使用 JSONL 所在文件夹或音频文件夹内的路径",
    "job_did_you_mean": "找不到 prompt_audio 文件 {value!r}；是不是 {near!r}？（这里的文件名区分大小写）",
    "job_not_found": "找不到 prompt_audio 文件 {value!r}（查找了：{looked}）",
    "job_not_found_no_source": "找不到 prompt_audio 文件 {value!r}（查找了：{looked}；没有提供音频 ZIP 或文件夹）",
    "job_not_audio": "prompt_audio {value!r} 不是音频（该文件是 {what}）；请提供 WAV、FLAC、MP3、OGG 或 M4A 录音",
    "job_too_short": "prompt_audio {value!r} 只有 {duration_s:.2f} 秒；参考音频至少需要 {min_s:g} 秒语音（5-15 秒效果最好）",
    "job_unreadable": "无法读取 prompt_audio {value!r}：{reason}",
    "job_zip_unreadable": "无法从音频 ZIP 中读取 prompt_audio {value!r}：{reason}",
    "job_zip_too_many": "音频 ZIP 有 {count} 个文件；最多接受 {limit} 个",
    "job_zip_too_big": "音频 ZIP 解压后有 {size} 字节；上限是 {limit} 字节",
    "job_zip_outside": "音频 ZIP 中的 {member!r} 指向压缩包之外；拒绝该 ZIP（请用普通相对路径重新打包）",
    "job_zip_symlink": "音频 ZIP 中的 {member!r} 是符号链接；拒绝该 ZIP",
    "job_zip_unreadable_file": "音频压缩包 {name!r} 不是可读取的 ZIP 文件：{reason}",
    "job_zip_grew": "音频 ZIP 解压后超过 {limit} 字节；拒绝该 ZIP",
    "job_zip_ratio": "音频 ZIP 中的 {member!r} 解压后是压缩大小的 {ratio:.0f} 倍（最多接受 {limit:.0f} 倍：音频几乎无法压缩，"
                     "这看起来像 ZIP 炸弹）；拒绝该 ZIP",
    "job_name_type": "output_name 必须是字符串，而不是 {type}",
    "job_name_path": "output_name {value!r} 含有路径；输出总是放在输出文件夹中，请给出普通文件名，例如 {plain!r}",
    "job_name_empty_after": "output_name {value!r} 去掉不安全字符后为空",
    "job_name_too_long": "output_name 长 {size} 字节；最多 {limit} 字节",
    "job_renamed": "output_name {value!r} 已改名为 {name!r}（原名在某些系统上不是安全的文件名）；音频文件为 {file!r}",
    "job_name_empty": "output_name 为空；改用行号和开头几个字，音频文件为 {file!r}",
    "job_duplicate_name": "output_name {name!r} 重复：第 {first} 行已使用（第 {first} 行和第 {line} 行）；请为每行指定不同的 output_name",
    "job_bad_json": "JSON 格式错误：{detail}（第 {column} 列）",
    "job_bad_json_backslash": "JSON 格式错误：{detail}（第 {column} 列）；路径中的反斜杠要写两次（\\\\），最好改用正斜杠",
    "job_line_too_long": "这一行有 {num_chars} 个字符；最多 {max_chars} 个",
    "job_json_number": "JSON 格式错误：有一个 {num_chars} 位的数字；每个数字最多 {max_chars} 个字符",
    "job_json_depth": "JSON 格式错误：对象和列表嵌套了 {depth} 层；最多 {max_depth} 层",
    "job_bad_json_other": "JSON 格式错误：{detail}",
    "job_json_nested": "JSON 格式错误：嵌套太深；最多 {max_depth} 层",
    "job_not_object": "应为 JSON 对象 {{...}}，实际是 {type}",
    "job_json_expecting_value": "缺少值",
    "job_json_property_name": "属性名应以双引号括起",
    "job_json_comma": "缺少逗号 ','",
    "job_json_colon": "缺少冒号 ':'",
    "job_json_unterminated": "字符串没有结束",
    "job_json_extra_data": "多余的内容",
    "job_json_bad_escape": "无效的反斜杠转义",
    "job_json_control_char": "无效的控制字符",
    "job_unknown_field": "未知字段 {field!r}，已忽略",
    "job_both_given": "同时给出了 {first!r} 和 {second!r}，且值不同；请只保留一个",
    "job_same_field_twice": "{theirs!r}（GLM-TTS 的字段名）和 {ours!r}（本程序的字段名）是同一个字段；请只保留一个",
    "job_mixed_formats": "这一行混用了 GLM-TTS 的字段名（{theirs}）和本程序的字段名（{ours}）；请只用一种格式："
                         "uttid + prompt_text + prompt_speech + syn_text（GLM-TTS），或 output_name + prompt_text + "
                         "prompt_audio + input_text",
    "job_missing_theirs": "缺少字段 {field!r}（{meaning}；这一行用的是 GLM-TTS 的字段名，需要 uttid、prompt_text、"
                          "prompt_speech 和 syn_text）",
    "job_audio_found_as": "{field} {value!r} 按 {root}中的 {found!r} 读取（路径是从上一级文件夹写的，GLM-TTS 的示例就是这样）；"
                          "改写为 {found!r} 即可消除此提示",
    "job_missing_near": "缺少字段 {field!r}（找到了 {near!r}；请改名为 {field}）",
    "job_missing": "缺少字段 {field!r}（{meaning}）",
    "job_missing_no_default": "{missing}，且没有设置默认声音",
    "job_meaning_text": "要朗读的文本",
    "job_meaning_audio": "参考音频文件",
    "job_text_empty": "'input_text' 必须是非空字符串",
    "job_prompt_text_type": "'prompt_text' 必须是字符串",
    "job_voice_type": "'voice' 必须是已保存声音的名字（非空字符串）",
    "job_voice_and_audio": "同时给出了 'voice' 和 'prompt_audio'；请只保留一个",
    "job_voice_unknown": "声音库中没有声音 {voice!r}（现有声音：{names}）；请先保存它、检查拼写，或改用 prompt_audio",
    "job_none": "无",
    "job_audio_type": "'prompt_audio' 必须是文件路径字符串",
    "job_param_list": "{name}={value!r} 必须是秒数列表，文本每行一个，例如 [2.5, 1.8]",
    "job_param_bool": "{name}={value!r} 必须是 true/false",
    "job_param_int": "{name}={value!r} 必须是整数",
    "job_param_float": "{name}={value!r} 必须是数",
    "job_param_finite": "{name}={value!r} 必须是有限的数",
    "job_format_unknown": "未知的格式 {value!r}；请使用 {allowed} 之一（或省略以使用任务的格式）",
    "job_emo_audio_type": "'emo_audio_prompt' 必须是文件路径字符串",
    "job_emo_unknown": "'emo_vector' 含有未知情感 {unknown}；请使用 {allowed}",
    "job_emo_vector": "'emo_vector' 必须是 {count} 个数的列表，或情感权重对象，例如 {{\"happy\": 0.8}}",
    "job_emo_alpha": "'emo_alpha' 必须是 [0, 1] 之间的数",
    "job_emo_use_text": "'use_emo_text' 必须是 true/false",
    "job_emo_text_type": "'emo_text' 必须是字符串",
    "job_emo_text_alone": "'emo_text' 只在 \"use_emo_text\": true 时才会读取；请加上它，或删去 emo_text",
    "job_script_list": "列表形式的 'script' 应由含 'speaker' 和 'text' 的对象组成",
    "job_script_empty": "'script' 必须是非空的对话文本（'Speaker 1: ...' 这样的行）",
    "job_script_clash": "同时给出了 'script' 和 {field!r}；对话的声音来自 'speakers'",
    "job_script_speakers": "'script' 需要 'speakers'：{{\"1\": \"声音名或音频文件\", ...}}",
    "job_speaker_voice": "speakers：{label} 的声音必须是声音名或文件路径",
    "job_ignored_knob": "{name} 已忽略：{family} 模型没有这项设置（{source}）",
    "job_cancelled": "已取消",
    "job_cancelled_before_start": "运行前已取消",
    "job_no_audio": "没有生成音频",
    "job_internal_error": "内部错误：{error}",
    "job_failed": "失败",
    "job_write_failed": "无法写入该行的音频（{name}：{reason}）；请释放磁盘空间后继续该任务，以重新运行这一行",
    "job_stopped_write": "任务已停止：无法写入结果（{reason}）；{num_lines} 行中已记录 {num_recorded} 行。请释放磁盘空间后继续该任务："
                         "已完成的行会保留，其余的行重新运行",
    "job_validation_head": "{path}：共 {num_lines} 行，{num_valid} 行有效，{num_invalid} 行无效，{num_warnings} 条提示"
                           "（编码 {encoding}）",
    "job_validation_row": "  {where}：{status}：{message}",
    "job_job_file": "任务文件",
    "job_line": "第 {line} 行",
    "job_row_error": "错误",
    "job_row_warning": "提示",
    "job_summary": "共 {num_lines} 行：成功 {num_ok}，失败 {num_failed}，跳过 {num_skipped}（之前已完成）{cancelled}，用时 "
                   "{elapsed_s:.1f} 秒；结果在 {path}",
    "job_summary_cancelled": "，取消 {count}",
    "job_failed_line": "  第 {line} 行：{message}",
    "job_ray_missing": "--ray 需要 Ray，但它没有安装；请用 `python3 -m pip install -r {requirements}` 安装（本应用测试过的版本），"
                       "或不用 --ray 运行",
    "job_ray_start_failed": "无法在本机启动 Ray 集群：{error}",
    "job_ray_unreachable": "无法连接 {address!r} 处的 Ray 集群：{error}；{hint}，或使用 --ray local",
    "job_ray_hint_auto": "请在本机用 `ray start --head` 启动一个",
    "job_ray_hint_address": "请确认那里运行着 `ray start --head`，且 {address} 是它的地址（在头节点上运行 `ray status` 可看到）",
    "job_ray_join_failed": "无法加入 {address!r} 处的 Ray 集群：{error}",
    "job_ray_device_index": "--device {device} 不能与 --ray 同用：Ray 为每个工作进程分配自己的 GPU（--gpus-per-worker）；"
                            "请用 --device auto 或 cuda",
    "job_ray_cuda_no_gpus": "--device cuda 需要 --gpus-per-worker 大于 0（集群有 {cluster_gpus:g} 个 GPU）",
    "job_ray_cpu_with_gpus": "--device cpu 与 --gpus-per-worker {gpus:g} 同用：GPU 会闲置；请去掉其中一个",
    "job_ray_no_gpu_worker": "每个工作进程需要 {gpus:g} 个 GPU，但集群只有 {cluster_gpus:g} 个；请用 --gpus-per-worker 0"
                             "（或 --device cpu）在 CPU 上运行，或用 `ray start --address=HEAD:6379` 加入 GPU 机器",
    "job_ray_too_few_gpus": "{workers} 个工作进程 x {gpus:g} 个 GPU 共需 {needed:g} 个 GPU，但集群只有 {cluster_gpus:g} 个；"
                            "请减小 --num-workers 或 --gpus-per-worker（小数可共享 GPU），或用 "
                            "`ray start --address=HEAD:6379` 加入 GPU 机器",
    "job_ray_too_few_cpus": "{workers} 个工作进程 x {cpus:g} 个 CPU 共需 {needed:g} 个 CPU，但集群只有 {cluster_cpus:g} 个；"
                            "请减小 --num-workers 或 --cpus-per-worker",
    "job_ray_not_ready": "工作进程 {workers} 在 {timeout_s:g} 秒内没有就绪（分配资源并加载模型）；请用 `ray status` 查看空闲资源，"
                         "或调大超时",
    "job_ray_worker_start_failed": "工作进程 {n} 启动失败：{error}",
    "job_ray_worker_load_failed": "工作进程 {n} 无法加载模型：{error}",
    "job_ray_cluster": "Ray 集群：{nodes} 个节点，{cpus:g} 个 CPU，{gpus:g} 个 GPU；启动 {workers} 个工作进程，每个 "
                       "{gpus_per_worker:g} 个 GPU、{cpus_per_worker:g} 个 CPU",
    "job_ray_worker_ready": "工作进程 {n} 已就绪：{family}，设备 {device}{gpu_ids}，节点 {node}，pid {pid}",
    "job_ray_gpu_ids": "（GPU {ids}）",
    "job_ray_worker_stopped": "工作进程 {n}（{node} 上的 pid {pid}）已停止：{error}；它的行交给其他工作进程",
    "job_ray_worker_back": "工作进程 {n} 已恢复",
    "job_ray_worker_gone": "工作进程 {n} 已不可用（{error}）",
    "job_ray_not_back": "{timeout_s:g} 秒内没有恢复",
    "job_ray_no_answer": "{timeout_s:g} 秒内没有应答（正在加载或换页？）",
    "job_ray_no_worker_for_voice": "没有在线的 Ray 工作进程来检查默认声音",
    "job_ray_no_worker_left": "没有剩下的 Ray 工作进程来运行它（{count} 个全部停止）；集群恢复后请用 --resume 重新运行",
    "job_ray_internal_error": "Ray 工作进程上的内部错误：{error}",
    "job_ray_line_worker_stopped": "运行它的 Ray 工作进程停止了 {count} 次（最后一次：{error}）",
    "job_ray_ran_on": "在 {count} 个 Ray 工作进程上运行",
    "job_ray_retried": "；{count} 行在其工作进程停止后交给了另一个工作进程",
    "job_progress_unit": "行",
    "job_count_ok": "成功", "job_count_failed": "失败", "job_count_cancelled": "取消",
    "job_count_skipped": "跳过",
    "job_no_model_needed": "没有需要模型的行（每行都无效或已完成）；不加载模型",
    "job_cancelling": "正在取消：正在运行的行会完成，其余记为已取消（再按一次 Ctrl-C 立即停止）",
    "job_interrupted": "已中断；已完成的行会保留，用 --resume 继续",
    "job_cancelled_resume": "已取消；用 --resume 完成未做的行",
}

register(__name__, EN, ZH)

#: ``json.JSONDecodeError.msg`` -> the key of its wording above (an unknown message is shown as it is)
JSON_ERRORS = {EN[key]: key for key in EN if key.startswith("job_json_")}


def json_error(msg: str) -> Notice | str:
    """The json module's parse-error message ``msg`` as a message of the tables, when it is one of theirs."""
    key = JSON_ERRORS.get(msg)
    return Notice(key) if key is not None else msg

__all__ = ["EN", "ZH", "Notice"]
