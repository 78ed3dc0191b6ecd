"""The key layout of one bare-metal cluster in etcd, in one place.

<root>/hosts/<host>             alive: written under the host daemon's lease, gone when it expires
<root>/out/<host>               taken out (JSON: reason, when), until `lamplighter hosts resume HOST`
<root>/placer                   the placer's name, under its lease: who may move groups
<root>/jobs/<job>/groups/<g>    where group g runs (JSON: host, epoch, reason); written by the placer only
<root>/jobs/<job>/failed/<g>    a host daemon saying group g cannot be restarted on its host (JSON: host, epoch)
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.configs.bare_metal import check_name


@dataclass(frozen=True)
class Keys:
    cluster: str

    def __post_init__(self) -> None:
        check_name(self.cluster, "cluster name")

    @property
    def root(self) -> str:
        return f"/lamplighter/{self.cluster}/"

    @property
    def hosts(self) -> str:
        return self.root + "hosts/"

    def host(self, name: str) -> str:
        return self.hosts + check_name(name, "host")

    @property
    def outs(self) -> str:
        return self.root + "out/"

    def out(self, name: str) -> str:
        return self.outs + check_name(name, "host")

    @property
    def placer(self) -> str:
        return self.root + "placer"

    def spec(self, job: str) -> str:
        return f"{self.root}jobs/{check_name(job, 'job')}/spec"

    def groups(self, job: str) -> str:
        return f"{self.root}jobs/{check_name(job, 'job')}/groups/"

    def group(self, job: str, g: int) -> str:
        return f"{self.groups(job)}{int(g)}"

    def failures(self, job: str) -> str:
        return f"{self.root}jobs/{check_name(job, 'job')}/failed/"

    def failed(self, job: str, g: int) -> str:
        return f"{self.failures(job)}{int(g)}"

    @staticmethod
    def last(key: str) -> str:
        return key.rsplit("/", 1)[-1]
