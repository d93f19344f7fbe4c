"""Which server process holds a row (a reply draft, a turn's slot): memory.processes, which
import jobs use too."""

from memory.processes import HOST, PROCESS, is_dead, start_time  # noqa: F401
