"""The runtime: the background loop every executor runs on (``runtime.loop``), the executor
interface (``runtime.executor``) and the poll loop that follows an executor's jobs
(``runtime.tracker``). Below the launcher kinds, above the values (docs/jobs.md, Layers)."""
