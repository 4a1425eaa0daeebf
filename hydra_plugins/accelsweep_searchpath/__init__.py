"""Hydra searches the user config directory after hydra_conf/: cluster files written by `jobs.cluster init`."""
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class AccelsweepSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from jobs.conf import user_dir

        search_path.append(provider="accelsweep-user", path=f"file://{user_dir()}")
