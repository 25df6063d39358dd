"""Everything that reads this machine: NVML sessions, inventories and the live poller (``devices``,
``nvml_session``), this CPU's features (``cpu``) and the measured per-process GPU overhead
(``overhead``). The planner takes what these read as arguments (docs/architecture.md, "Layout")."""
