# SPDX-License-Identifier: ISC
"""What tools/bench-live.py and tools/bench-analytics.py share (imported, not run)."""
import os
import socket
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLIC = os.path.join(HERE, '../../shared/corescope/public')  # CoreScope's front end


def loadavg():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def group_memory(pid):
    """PSS and RSS (MiB) summed over pid and its descendants (smem's sum: a page shared by n
    of them counts 1/n to each), from /proc/PID/smaps_rollup; and how many processes."""
    pids, i = [pid], 0
    while i < len(pids):
        try:
            with open(f'/proc/{pids[i]}/task/{pids[i]}/children') as f:
                pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        i += 1
    pss = rss = 0
    for p in pids:
        try:
            with open(f'/proc/{p}/smaps_rollup') as f:
                for line in f:
                    if line.startswith('Pss:'):
                        pss += int(line.split()[1])
                    elif line.startswith('Rss:'):
                        rss += int(line.split()[1])
        except OSError:
            pass
    return pss / 1024, rss / 1024, len(pids)


def meshgate_env(build, db, port, tag, **settings):
    """The environment of a meshgate on 127.0.0.1:port over db (no other MESHGATE_ variable:
    it refuses unknown ones), 2 workers, errors logged only; settings are added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('MESHGATE_')}
    env.update(MESHGATE_DB=db, MESHGATE_LISTEN=f'127.0.0.1:{port}',
               MESHGATE_SHM_NAME=f'/meshgate-{tag}-{os.getpid()}-{port}',
               MESHGATE_LOG_LEVEL='error', MESHGATE_WORKERS='2')
    env.update(settings)
    return env


def corescope_argv(peer, db, port, config_dir, *more):
    """CoreScope's server on 127.0.0.1:port (run with CORESCOPE_LISTEN_HOST=127.0.0.1)."""
    return [os.path.join(peer, 'corescope-server'), '-db', db, '-port', str(port),
            '-config-dir', config_dir, '-public', PUBLIC, *more]


def stop(proc, log):
    """SIGTERM to the server's pid, SIGKILL after 60 s; its log closed."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
