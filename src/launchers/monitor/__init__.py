"""``launchers monitor``: a live web page over experiment directories (docs/monitor.md).

The server only reads job directories (``state.json`` and the files beside it), so it never
needs to be the process that submitted the jobs; with ``--track`` it also follows unfinished
jobs through their executors, as ``launchers cancel`` does. Modules:

* ``model``: pure functions from records to what the page shows (rows, summaries, timeline);
* ``scan``: finding experiments and reading job directories;
* ``watch``: change detection (inotify where the kernel gives it, plus a stat sweep);
* ``index``: the in-memory rows of every experiment and the live updates they publish;
* ``security``: the token, the allowed hosts, the job paths a request may name;
* ``actions``: cancel and ``--track`` through the jobs layer;
* ``app``: the HTTP application (Starlette); ``server``: running it (uvicorn).

``model``, ``scan`` and ``security`` need no web library; ``app`` and ``server`` need the
``monitor`` extra (``pip install 'launchers[monitor]'``).
"""
