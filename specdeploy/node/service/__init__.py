"""Starting the server: the read-ahead before the stop (prefetch), the ExecStartPre check
(prestart, run by path from the unit), the engine log's load phases (engine_log) and the start's
progress with an ETA (start_progress).
"""
