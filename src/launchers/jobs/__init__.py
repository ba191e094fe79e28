"""The job model: tasks, jobs and their records, experiments, executors, the tracker, tokens.

``state`` (JobState), ``task`` (command, @task, Task), ``record`` (job directory, state.json),
``job`` (Job, submit/re-attach), ``experiment``, ``executor`` (Executor ABC, registry),
``loop`` (background asyncio loop), ``tracker`` (poll loop), ``tokens``, ``progress``, ``proc``.
"""
