"""Loopback UNICORE and firecREST servers for the tests (docs/design/sites.md §4).

Standard-library HTTP on 127.0.0.1 (a free port), threaded; jobs run on the real local Slurm.
Each server has fault knobs (429, 502/503 bursts, late visibility, token lifetime, expired
sessions, failing uploads) so the executors' recovery paths run against real clients.
"""
