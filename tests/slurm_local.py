"""A real one-node Slurm cluster on loopback, for the cluster tests: munged, slurmctld and slurmd
started from Debian's `munge` and `slurm-wlm` packages, everything in one temporary folder.

Node n1 (this machine) declares two fake H100s (`Gres=gpu:h100:2`, gres.conf `File=` two
device nodes made like /dev/null), so Slurm schedules GPU requests exactly as on a GPU node
while the tasks find no GPU. Node n2 is declared with a GPU type the driver does not know
and never starts: its partition exists only to be refused. MaxArraySize=3 lets a test make
Slurm itself refuse a larger array.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "sinfo", "scontrol", "scancel", "squeue")
MAX_ARRAY_SIZE = 3


def skip_reason() -> str | None:
    """Why this machine cannot run a local Slurm, or None."""
    missing = [t for t in (*DAEMONS, *CLIENTS) if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if missing:
        return (f"Slurm is not installed here ({', '.join(missing)} missing): `bash .ci/install-slurm` installs "
                "Debian's slurm-wlm and munge")
    if os.geteuid() != 0:
        return "not root: slurmd must run as root to start jobs as their user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class SlurmStartFailed(RuntimeError):
    pass


class LocalSlurm:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        r = self.root
        for sub in ("state", "spool", "log", "dev"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        devices = []
        for i in range(2):  # GRES files must be device nodes: two made like /dev/null (char 1:3)
            dev = r / "dev" / f"fakegpu{i}"
            try:
                os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 3))
            except OSError:
                dev.touch()  # no mknod here: slurmd logs a complaint about a plain file and still counts it
            devices.append(str(dev))
        cpus = os.cpu_count() or 1
        self.conf.write_text(f"""\
ClusterName=drivertest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r / 'munge.sock'}
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}/%n
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.%n.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.%n.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MinJobAge=600
MaxArraySize={MAX_ARRAY_SIZE}
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
MpiDefault=none
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:h100:2 State=UNKNOWN
NodeName=n2 NodeHostname=nohost NodeAddr=127.0.0.2 CPUs=1 RealMemory=1000 Gres=gpu:mystery:1 State=UNKNOWN
PartitionName=h100 Nodes=n1 Default=YES MaxTime=INFINITE State=UP
PartitionName=odd Nodes=n2 MaxTime=INFINITE State=UP
""")
        (r / "gres.conf").write_text(
            f"NodeName=n1 Name=gpu Type=h100 File={devices[0]}\n"
            f"NodeName=n1 Name=gpu Type=h100 File={devices[1]}\n"
            "NodeName=n2 Name=gpu Type=mystery Count=1\n"
        )

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")  # noqa: SIM115 - the daemon writes it until stop()
        self.procs.append(subprocess.Popen([_exe(name), *args], stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env, start_new_session=True))

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-5:]
            parts.append(f"{path.name}: " + " | ".join(lines))
        return "; ".join(parts)

    def run(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, timeout_s: float = 60) -> None:
        self._write_config()
        r = self.root
        self._spawn("munged", "-F", "--force", f"--socket={r / 'munge.sock'}", f"--key-file={r / 'munge.key'}",
                    f"--pid-file={r / 'munged.pid'}", f"--log-file={r / 'log' / 'munged.log'}",
                    f"--seed-file={r / 'munged.seed'}")
        deadline = time.monotonic() + timeout_s
        while not (r / "munge.sock").exists():
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                raise SlurmStartFailed(f"munged did not start: {self.logs()}")
            time.sleep(0.2)
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf), "-N", "n1")
        while True:
            res = self.run("sinfo", "-h", "-n", "n1", "-o", "%T")
            state = res.stdout.strip()
            if res.returncode == 0 and state == "idle":
                return
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SlurmStartFailed(f"node n1 is {state or 'not up'!r} after {timeout_s:.0f} s"
                                       f"{'; exited: ' + ', '.join(dead) if dead else ''}; {self.logs()}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.conf.exists():
            try:
                self.run("scancel", "--user=root", timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for proc in reversed(self.procs):  # slurmd, slurmctld, then munged; only the ones started here
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self.procs.clear()
