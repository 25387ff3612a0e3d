"""Real Slurm clusters started by the tests (as root, with Debian's slurm-wlm and munge).

`single_node_cluster`: slurmctld + one slurmd on this host (tests/test_slurm.py).
`TwoNodeCluster`: one slurmctld and two slurmd, each daemon in a network namespace of its own with
its own address on a bridge the test makes (10.77.0.10 ctl, .11 node1, .12 node2) and its own
hostname (a UTS namespace), so a job spans two "hosts" that reach each other only over that
network, as on a real cluster: srun starts the tasks through each node's slurmd, and the
rendezvous address is the first node's. Each daemon also gets a private /etc/hosts naming the
three (a mount namespace), so `node1` resolves inside the cluster only. Nothing is added to the
host's own interfaces, and everything is torn down at the end. Debian's build runs several
slurmd on one host this way without --enable-multiple-slurmd: each sees one node by its hostname.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

NEEDS = ("slurmctld", "slurmd", "munged", "ip", "unshare", "nsenter")


def missing_requirements() -> str:
    """Why a Slurm test cannot run here ('' when it can)."""
    if os.geteuid() != 0:
        return "needs root (Slurm daemons, namespaces)"
    absent = [name for name in NEEDS if shutil.which(name) is None]
    return f"needs {', '.join(absent)} (apt-get install slurm-wlm munge iproute2 util-linux; .ci/run installs them)" if absent else ""


def start_munge() -> None:
    os.makedirs("/run/munge", exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    if not os.path.exists("/etc/munge/munge.key"):
        subprocess.run(["mungekey", "-c"], check=True)
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)


def slurm_conf(root: Path, controller: str, nodes: list[str], cpus: int) -> str:
    """slurm.conf for a CPU-only cluster: `controller` is SlurmctldHost's value, `nodes` NodeName
    lines' heads; per-node paths use %n so several slurmd can share the file."""
    return "\n".join([
        "ClusterName=bertds", f"SlurmctldHost={controller}", "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SlurmUser=root", "SlurmdUser=root", "MpiDefault=none", "ReturnToService=2",
        "SlurmdParameters=config_overrides", "KillWait=30",
        # A requeued job waits this long before it starts again (default 120 s): kept above the
        # controller's 60 s retry of a timed-out RPC (tests/test_slurm_two_nodes.py says why).
        "AuthInfo=cred_expire=90",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/slurmctld.log", f"SlurmdLogFile={root}/slurmd-%n.log",
        *(f"NodeName={node} CPUs={cpus} RealMemory=8000 State=UNKNOWN" for node in nodes),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", "",
    ])


def wait_for_idle(run, nodes: int, log: Path, timeout: float = 60) -> None:
    """Until sinfo (through `run`) shows `nodes` idle nodes; the controller's log on a timeout."""
    deadline = time.time() + timeout
    while True:
        states = run(["sinfo", "-h", "-N", "-o", "%t"]).stdout.split()
        if states.count("idle") >= nodes:
            return
        assert time.time() < deadline, f"nodes {states} not idle: {log.read_text()[-2000:] if log.exists() else ''}"
        time.sleep(1)


ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def job_state(client, job: str) -> str:
    """A job's JobState from `scontrol show job`, run through `client` (a command -> CompletedProcess)."""
    info = client(["scontrol", "show", "job", job]).stdout
    return next((w.split("=")[1] for w in info.split() if w.startswith("JobState=")), "UNKNOWN")


def wait_for_job(client, job: str, until, timeout: float = 400) -> None:
    """Until `until()` holds; a job that ended without it fails at once (not at the timeout)."""
    deadline = time.time() + timeout
    while not until():
        state = job_state(client, job)
        assert state not in ENDED or until(), f"job {job} ended {state} first"
        assert time.time() < deadline, f"job {job} still {state}"
        time.sleep(2)


def wait_until_ended(client, job: str, timeout: float = 400) -> str:
    wait_for_job(client, job, lambda: job_state(client, job) in ENDED, timeout)
    return job_state(client, job)


def is_rank(pid: int, entrypoint: str, naming: str | None = None) -> bool:
    """Whether `pid` is a rank running ENTRYPOINT (python .../pretrain.py), not srun or the batch
    script naming it; with `naming`, only one whose arguments include that exact string."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            argv = file.read().split(b"\0")
    except OSError:
        return False
    return (b"python" in os.path.basename(argv[0]) and any(arg.endswith(entrypoint.encode()) for arg in argv[1:2])
            and (naming is None or naming.encode() in argv))


def stop_by_pid_files(root: Path) -> None:
    for pid_file in root.glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass


def single_node_cluster(root: Path):
    """slurmctld + slurmd on this host; yields the environment that points sbatch at them."""
    for folder in ("state", "spool"):
        (root / folder).mkdir()
    host = socket.gethostname()
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host, [host], os.cpu_count() or 1))
    (root / "spool" / host).mkdir()
    start_munge()
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
    wait_for_idle(lambda command: subprocess.run(command, capture_output=True, text=True, env=env), 1,
                  root / "slurmctld.log")
    try:
        yield env
    finally:
        stop_by_pid_files(root)


class TwoNodeCluster:
    """Two slurmd "hosts" and a controller, each in its own network, UTS and mount namespace."""

    HOSTS = {"ctl": "10.77.0.10", "node1": "10.77.0.11", "node2": "10.77.0.12"}

    def __init__(self, root: Path):
        self.root = root
        tag = os.getpid() % 100_000  # names unique to this run (interface names: 15 characters at most)
        self.namespaces = {host: f"bds{tag}{host}" for host in self.HOSTS}
        self.bridge = f"bdsbr{tag}"
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> "TwoNodeCluster":
        for folder in ("state", "spool/node1", "spool/node2"):
            (self.root / folder).mkdir(parents=True)
        (self.root / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in self.HOSTS.items()))
        self.conf.write_text(slurm_conf(self.root, f"ctl({self.HOSTS['ctl']})", [
            f"{node} NodeAddr={self.HOSTS[node]}" for node in ("node1", "node2")], cpus=2))
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("link", "set", self.bridge, "up")
        for number, (host, address) in enumerate(self.HOSTS.items()):
            namespace, outside = self.namespaces[host], f"{self.bridge}v{number}"
            self._ip("netns", "add", namespace)
            self._ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            self._ip("link", "set", outside, "master", self.bridge, "up")
            for command in (["addr", "add", f"{address}/24", "dev", "eth0"], ["link", "set", "eth0", "up"],
                            ["link", "set", "lo", "up"]):
                self._ip("-n", namespace, *command)
        start_munge()
        self.on("ctl", ["slurmctld", "-f", str(self.conf)], check=True)
        for node in ("node1", "node2"):
            self.on(node, ["slurmd", "-f", str(self.conf)], check=True)
        wait_for_idle(self.client, 2, self.root / "slurmctld.log")
        return self

    def on(self, host: str, command: list[str], **options) -> subprocess.CompletedProcess:
        """`command` as run on `host`: its network namespace, hostname and /etc/hosts."""
        inside = ("mount --bind \"$1\" /etc/hosts && hostname \"$2\" && shift 2 && "
                  "exec nsenter --net=/run/netns/\"$NS\" \"$@\"")
        return subprocess.run(
            ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", inside, "sh",
             str(self.root / "hosts"), host, *command],
            capture_output=True, text=True, env={**self.env, "NS": self.namespaces[host], **options.pop("env", {})},
            **options)

    def client(self, command: list[str], **options) -> subprocess.CompletedProcess:
        """A Slurm client command (sbatch, scontrol, sinfo) as run on the controller's host."""
        return self.on("ctl", command, **options)

    def pids(self, host: str) -> list[int]:
        listed = subprocess.run(["ip", "netns", "pids", self.namespaces[host]], capture_output=True, text=True).stdout
        return [int(pid) for pid in listed.split()]

    def stop(self) -> None:
        stop_by_pid_files(self.root)
        time.sleep(1)
        for namespace in self.namespaces.values():
            for pid in subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)  # a task or daemon left behind
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        # The outer veth ends too: a namespace outlives its name while a copy of its mount (in a
        # daemon's private mount namespace) is being released, and its veth pair with it.
        for number in range(len(self.HOSTS)):
            subprocess.run(["ip", "link", "del", f"{self.bridge}v{number}"], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)
