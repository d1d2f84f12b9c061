"""The peak RSS of a process the benchmarks start, as a Python expression for it to evaluate.

Its own VmHWM, in bytes. Not getrusage's ru_maxrss: that keeps, across the exec that started the
interpreter, the RSS of the process that spawned it (the benchmark's), so a benchmark that spawns
what it measures would count itself.
"""
PEAK_RSS = "[int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0]"
