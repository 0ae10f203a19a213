"""Programs that run on the hosts themselves (stdlib only; Python 3.10, the oldest image's).

Each module here is copied verbatim to ``/opt/agk/lib`` on the hosts that need it (see
``HOST_PROGRAMS`` and ``host_program`` in modules/bootstrap/roles/upkeep.py and node_files.py, ``LIBRARY`` in
modules/bootstrap/etcd_backup.py) and imported by the host scripts, so the tests
import the very code the hosts run.
"""
