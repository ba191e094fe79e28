"""The job model: tasks, jobs and their records, experiments.

``state`` (JobState), ``task`` (command, @task, Task), ``record`` (job directory, state.json),
``update`` (StateUpdate, the final update a job.rc implies), ``job`` (Job, submit/re-attach),
``experiment``, ``progress``, ``proc``. The loop, the executor interface and the tracker are in
``launchers.runtime``; the registry of kinds is ``launchers.registry``.
"""
