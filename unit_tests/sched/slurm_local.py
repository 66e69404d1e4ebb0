"""A real Slurm cluster on this machine for the tests and replays of sched's Slurm backend.

One slurmctld on the host and one slurmd per node, each node in its own network namespace (own address, so several
slurmd run on one host without a multiple-slurmd build), with typed GPUs backed by empty device files, as in
../shared/docs/slurm-local.md. Everything it starts it stops by pid; a node "crashes" by killing every process in its
namespace (slurmd, slurmstepd and the job's processes).

    with LocalSlurm(work_dir, [("a1", "a100", 4), ("v1", "v100", 4)]) as slurm:
        env = slurm.env           # SLURM_CONF for sinfo / squeue / sbatch / tessel-sched serve
        slurm.crash_node("a1")

`LocalSlurm.unavailable()` says why a cluster cannot be made here (not root, Slurm or munge not installed, no network
namespaces), or returns None.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time



def _run(argv, check=True, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return p


class LocalSlurm:
    def __init__(self, work, nodes, slurmd_timeout=6, instance=0):
        """`instance` (0-9) picks the bridge, subnet, ports and namespace names, so that clusters of different
        instances run side by side (the tests use 0, the replay benchmark 1)."""
        self.instance = instance
        self.bridge = "tsslurm%d" % instance
        self.subnet = "10.231.%d" % (7 + instance)
        self.ctld_port = 6917 + 10 * instance
        self.slurmd_port = self.ctld_port + 1
        self.work = os.path.abspath(work)
        self.nodes = list(nodes)
        self.slurmd_timeout = slurmd_timeout
        self.procs = {}
        self.munged = None
        self.conf = os.path.join(self.work, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.munge_dir = "/run/tessel-munge%d" % instance
        self.munge_socket = os.path.join(self.munge_dir, "munge.socket")

    @staticmethod
    def unavailable():
        if os.geteuid() != 0:
            return "a test cluster needs root (slurmd, network namespaces)"
        for prog in ("slurmctld", "slurmd", "munged", "sinfo", "ip", "nsenter"):
            if shutil.which(prog) is None and not os.path.exists("/usr/sbin/" + prog):
                return "%s is not installed (scripts/deps installs slurm-wlm and munge)" % prog
        name = "tsprobe%d" % os.getpid()
        if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
            return "network namespaces cannot be made here (ip netns add failed)"
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        return None

    # -- set-up ------------------------------------------------------------------------------------------------
    def __enter__(self):
        # A SIGTERM (ctest's timeout, a user's kill) still runs the tear-down.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def ns(self, node):
        return "tsslurm%d-%s" % (self.instance, node)

    def veth(self, k):
        return "ts%dv%d" % (self.instance, k), "ts%dp%d" % (self.instance, k)

    def start(self):
        self._clean_leftovers()
        if os.path.exists(self.work):
            shutil.rmtree(self.work)
        for d in ("state", "log", "spool", "gpu"):
            os.makedirs(os.path.join(self.work, d))
        self._start_munge()
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", self.subnet + ".1/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        host = socket.gethostname().split(".")[0]
        conf = [
            "ClusterName=tessel%d" % self.instance, "SlurmctldHost=%s(%s.1)" % (host, self.subnet),
            "SlurmctldPort=%d" % self.ctld_port, "SlurmdPort=%d" % self.slurmd_port, "AuthType=auth/munge",
            "AuthInfo=socket=%s" % self.munge_socket, "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "GresTypes=gpu",
            "SlurmUser=root", "ReturnToService=2", "SlurmdTimeout=%d" % self.slurmd_timeout, "MessageTimeout=5",
            "KillWait=5", "MinJobAge=600", "SlurmdParameters=config_overrides",
            # The main scheduler and backfill every second (defaults 60 s and 30 s): a job starts 0.7 s after
            # sbatch instead of 1.8-2.7 s, and a job whose nodes are free is not held until the next backfill pass
            # because an earlier job pinned to busy nodes blocks the main scheduler's pass over the partition.
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "StateSaveLocation=%s/state" % self.work, "SlurmdSpoolDir=%s/spool/%%n" % self.work,
            "SlurmctldPidFile=%s/slurmctld.pid" % self.work, "SlurmdPidFile=%s/slurmd-%%n.pid" % self.work,
            "SlurmctldLogFile=%s/log/slurmctld.log" % self.work, "SlurmdLogFile=%s/log/slurmd-%%n.log" % self.work,
        ]
        gres = []
        for k, (name, gpu, count) in enumerate(self.nodes):
            addr = "%s.%d" % (self.subnet, 10 + k)
            ns, (veth, peer) = self.ns(name), self.veth(k)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
            _run(["ip", "link", "set", peer, "netns", ns])
            _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
            _run(["ip", "netns", "exec", ns, "ip", "addr", "add", addr + "/24", "dev", peer])
            _run(["ip", "netns", "exec", ns, "ip", "link", "set", peer, "up"])
            _run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
            gpu_dir = os.path.join(self.work, "gpu", name)
            os.makedirs(gpu_dir)
            for g in range(count):
                open(os.path.join(gpu_dir, "gpu%d" % g), "w").close()
            os.makedirs(os.path.join(self.work, "spool", name))
            conf.append("NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%d RealMemory=1000 Gres=gpu:%s:%d State=UNKNOWN"
                        % (name, addr, name, max(8, count), gpu, count))
            gres.append("NodeName=%s Name=gpu Type=%s File=%s/gpu[0-%d]" % (name, gpu, gpu_dir, count - 1))
        conf.append("PartitionName=main Nodes=%s Default=YES MaxTime=INFINITE State=UP"
                    % ",".join(n for n, _, _ in self.nodes))
        with open(self.conf, "w") as f:
            f.write("\n".join(conf) + "\n")
        with open(os.path.join(self.work, "gres.conf"), "w") as f:
            f.write("\n".join(gres) + "\n")
        self.start_controller(clean=True)
        for name, _, _ in self.nodes:
            self.start_node(name)
        self.wait_idle()

    def _start_munge(self):
        # Each cluster has its own munged (own key and socket, named in AuthInfo), so that it neither depends on nor
        # stops a system munged or another instance's, and a munged still exiting from the last test is never
        # taken for a live one.
        os.makedirs(self.munge_dir, mode=0o711)
        key = os.path.join(self.munge_dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        # munged -F stays in the foreground: this process owns it and stops it.
        d = self.munge_dir
        self.munged = subprocess.Popen(
            ["/usr/sbin/munged", "-F", "--force", "--socket=" + self.munge_socket, "--key-file=" + key,
             "--pid-file=%s/munged.pid" % d, "--log-file=%s/munged.log" % d, "--seed-file=%s/munged.seed" % d],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if _run(["munge", "-n", "-S", self.munge_socket], check=False).returncode == 0:
                return
            if self.munged.poll() is not None:
                break
            time.sleep(0.05)
        log = os.path.join(d, "munged.log")
        raise RuntimeError("munged did not start: " + (open(log).read()[-2000:] if os.path.exists(log) else ""))

    def start_controller(self, clean=False):
        argv = ["slurmctld", "-D", "-f", self.conf] + (["-i"] if clean else [])
        self.procs["slurmctld"] = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if _run(["sinfo", "-h"], check=False, env=self.env).returncode == 0:
                return
            if self.procs["slurmctld"].poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("slurmctld did not answer within 20 s: " + self.log("slurmctld"))

    def stop_controller(self):
        self._stop("slurmctld")

    def start_node(self, name):
        # nsenter enters only the network namespace (ip netns exec would remount /sys and hide the cgroup mount).
        argv = ["nsenter", "--net=/run/netns/" + self.ns(name), "slurmd", "-D", "-f", self.conf, "-N", name]
        self.procs["slurmd:" + name] = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL,
                                                        stderr=subprocess.DEVNULL)

    def crash_node(self, name):
        """Kills every process of the node (slurmd, slurmstepd, the jobs): a node that died."""
        pids = _run(["ip", "netns", "pids", self.ns(name)], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        p = self.procs.pop("slurmd:" + name, None)
        if p:
            p.wait()

    def nodes_json(self):
        return json.loads(_run(["sinfo", "--json"], env=self.env).stdout)["nodes"]

    def jobs_json(self):
        return json.loads(_run(["squeue", "--json"], env=self.env).stdout)["jobs"]

    def wait_idle(self, timeout=60):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            states = {n["name"]: n["state"] for n in self.nodes_json()}
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.2)
        raise RuntimeError("nodes not idle after %d s: %s" % (timeout, states))

    def log(self, daemon):
        path = os.path.join(self.work, "log", daemon + ".log")
        return open(path).read()[-3000:] if os.path.exists(path) else ""

    # -- tear-down -----------------------------------------------------------------------------------------------
    def _stop(self, key):
        p = self.procs.pop(key, None)
        if p is None:
            return
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def stop(self):
        for key in list(self.procs):
            if key.startswith("slurmd:"):
                self.crash_node(key.split(":", 1)[1])
        self._stop("slurmctld")
        for name, _, _ in self.nodes:
            self.crash_node(name)
            subprocess.run(["ip", "netns", "del", self.ns(name)], capture_output=True)
        for k in range(len(self.nodes)):
            subprocess.run(["ip", "link", "del", self.veth(k)[0]], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        if self.munged is not None:
            self.munged.terminate()
            try:
                self.munged.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.munged.kill()
                self.munged.wait()
            self.munged = None
        shutil.rmtree(self.munge_dir, ignore_errors=True)

    def _clean_leftovers(self):
        # A test killed before its tear-down leaves namespaces and a bridge named as ours: remove them.
        listing = _run(["ip", "netns", "list"], check=False).stdout.split("\n")
        for line in listing:
            ns = line.split(" ")[0]
            if ns.startswith(self.ns("")):
                for pid in _run(["ip", "netns", "pids", ns], check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        for line in _run(["ip", "-o", "link", "show"], check=False).stdout.split("\n"):
            parts = line.split(": ")
            if len(parts) > 1 and parts[1].split("@")[0].startswith("ts%dv" % self.instance):
                subprocess.run(["ip", "link", "del", parts[1].split("@")[0]], capture_output=True)
        # Daemons of an earlier test cluster (any folder) hold our ports and munge socket: they are recognised by
        # their config or socket.
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
            except OSError:
                continue
            if ("--socket=" + self.munge_socket).encode() in argv:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
                continue
            names = [os.path.basename(a.decode(errors="replace")) for a in argv[:3]]
            if not any(n in ("slurmctld", "slurmd") for n in names) or b"-f" not in argv:
                continue
            conf = argv[argv.index(b"-f") + 1].decode(errors="replace")
            try:
                ours = ("SlurmctldPort=%d\n" % self.ctld_port) in open(conf).read()
            except OSError:
                ours = False
            if ours:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.munge_dir, ignore_errors=True)
