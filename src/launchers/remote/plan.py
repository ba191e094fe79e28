"""A planned ``launchers run`` (docs/design/sites.md §3.4): everything decided before any I/O to a site.

``plan_run`` reads the project, the Compute Backend Config (or asks the finder), checks every
input, and returns a ``RunPlan``: uploads and exclusions, the command, the job script and the
UNICORE description. ``--dry-run`` prints it; ``launchers.remote.submit.run_project`` runs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..config.environment import EMPTY
from ..config.environment import Environment as Block
from ..config.model import FirecrestGroup, FirecrestSite, UnicoreGroup, UnicoreSite
from ..errors import ConfigurationError, LaunchersError
from ..jobs.task import Task, command, sanitize_name
from ..slurm.settings import launcher_environment
from .backend_config import BackendConfig, Site, load_backend_config, resolve_account, to_launcher
from .environment import Environment, check_project_paths, mixed_forms, validate_environment
from .exclude import ExcludeRules, Upload, UploadSet, collect_uploads
from .mlproject import (
    EntryPoint,
    MLProject,
    build_command,
    load_mlproject,
    parse_param_args,
    passed_environment,
    value_notes,
)
from .resources import Resources, resources_from_options
from .script import (
    JobScriptSpec,
    attempt_job_name,
    finder_pairs,
    job_name,
    render_job_script,
    run_id_for,
    sbatch_pairs,
    unicore_bss_file,
    unicore_description,
)
from .ssh_site import PROJECT_SUBDIR, SSHSite

DEFAULT_WORKDIR = "launchers-runs"
#: the kinds whose runs upload the project and run ``job.sh``'s environment steps (``script``)
REMOTE_KINDS = ("unicore", "firecrest", "ssh")


@attrs.frozen
class RunPlan:
    """One MLproject run, ready to submit. ``kind`` is the launcher kind (``unicore``,
    ``firecrest``, or ``slurm``/``local`` when ``-r`` chose such a group).

    What ``run_project(plan, *, follow, cancel_on_interrupt) -> int`` uses: ``site`` (with
    ``account``), ``all_uploads`` (each ``Upload.local`` sent as ``Upload.relpath``),
    ``script(run_dir)`` (``job.sh``), ``description()`` (UNICORE), ``run_id`` (the run
    directory's name), ``job_dir`` and ``task`` (the local job record), ``launcher`` (with
    ``-r``). ``standalone`` says whether Mantik's credential variables apply (docs/design/sites.md §2).
    """

    project: MLProject
    entry: EntryPoint
    params: Mapping[str, str] = attrs.field(hash=False)
    command: str
    kind: str
    task: Task
    workdir: Path
    uploads: UploadSet
    image: Upload | None = None
    environment: Environment = attrs.field(factory=Environment)
    #: launchers.yaml's ``environment:`` block of the group (with ``-r``: its partition's and
    #: node group's too), written by the one renderer; ``environment`` is then empty
    block: Block = EMPTY
    site: Site | None = None
    resources: Resources | None = None
    account: str | None = None
    exports: tuple[tuple[str, str], ...] = ()
    backend: BackendConfig | None = None
    launcher: Any = None  # the finder's launcher with -r
    sbatch: tuple[
        tuple[str, str | bool], ...
    ] = ()  # #SBATCH options (account included): firecREST, UNICORE raw
    notes: tuple[str, ...] = ()

    @property
    def standalone(self) -> bool:
        """A Compute Backend Config with its own site (not a launchers.yaml group)."""
        return self.backend is not None and self.backend.group is None

    @property
    def run_id(self) -> str:
        """``NAME-DIGEST-PLACE``: the task id and the place of its job directory, the run
        directory's name on a firecREST site (two workdirs never share one)."""
        return run_id_for(self.task.task_id, self.job_dir.absolute())

    @property
    def job_dir(self) -> Path:
        """The local job directory (``docs/design/runtime.md`` docs/design/sites.md §2)."""
        return self.workdir / "jobs" / self.task.name / self.task.digest

    @property
    def job_name(self) -> str:
        """``NAME-XXXX``: the base of the job's name at the site, ``NAME-XXXX-aN`` for attempt N
        (``[A-Za-z0-9_.-]``, at most 64)."""
        return job_name(f"{self.task.name}-{self.task.digest[:4]}")

    @property
    def all_uploads(self) -> tuple[Upload, ...]:
        """What is sent: the project files that are not empty, then the local Apptainer image."""
        files = tuple(u for u in self.uploads.uploads if u.size > 0)
        return files + ((self.image,) if self.image is not None else ())

    @property
    def empty_files(self) -> tuple[str, ...]:
        """Project files of size 0: ``job.sh`` creates them (an empty upload never ends on
        firecREST; docs/remote-sites.md)."""
        return tuple(u.relpath for u in self.uploads.uploads if u.size == 0)

    def script(self, run_dir: str | None = None, job_name: str | None = None) -> str:
        """``job.sh``; firecREST needs the absolute run directory (known once the site answered).
        ``job_name`` is the attempt's (default: the first attempt's, ``NAME-XXXX-a1``).

        For an SSH site: the script that the Slurm job script runs with ``bash -l`` in
        ``run_dir`` (the ``project/`` directory of the remote job directory)."""
        if self.kind not in REMOTE_KINDS:
            raise LaunchersError(f"a {self.kind} launcher writes its own job script")
        return render_job_script(
            JobScriptSpec(
                environment=self.environment,
                command=self.command,
                transport=self.kind,
                run_dir=run_dir if self.kind in ("firecrest", "ssh") else None,
                job_name=job_name or attempt_job_name(self.job_name, 1),
                sbatch=self.sbatch if self.kind == "firecrest" else (),
                exports=self.exports,
                cpus_per_node=self.resources.cpus_per_node if self.resources else None,
                run_id=self.run_id,
                empty_files=self.empty_files,
                block=self.block,
            )
        )

    def description(self) -> dict[str, Any]:
        """UNICORE's job description (docs/design/sites.md §3.2): a ``raw`` job with :meth:`bss_file`."""
        if self.kind != "unicore":
            raise LaunchersError("only a UNICORE run has a job description")
        return unicore_description(
            name=self.job_name, environment=self.environment, task_id=self.task.task_id
        )

    def bss_file(self) -> str:
        """UNICORE's ``BSS file``: the run's ``#SBATCH`` lines, passed to Slurm unchanged."""
        if self.kind != "unicore":
            raise LaunchersError("only a UNICORE run has a BSS file")
        return unicore_bss_file(attempt_job_name(self.job_name, 1), self.sbatch)

    def default_run_dir(self) -> str:
        """The run directory as far as known without asking the site (firecREST: ``BASE`` for
        the site's work directory; SSH: ``JOB_DIR`` for the remote job directory, chosen under
        the site's work directory at submission)."""
        if isinstance(self.site, SSHSite):
            return f"JOB_DIR/{PROJECT_SUBDIR}"
        base = (
            self.site.workdir
            if isinstance(self.site, FirecrestSite) and self.site.workdir
            else "BASE"
        )
        return f"{base}/{self.run_id}"


def _find_group(config: Any, group_id: str) -> UnicoreGroup | FirecrestGroup:
    # lazy: the configuration loader and the finder only when a run needs them (import time of launchers run)
    from ..config.loader import load_config

    cfg = load_config(config)
    kinds = []
    for g in cfg.groups:
        if g.id == group_id:
            if isinstance(g, (UnicoreGroup, FirecrestGroup)):
                return g
            kinds.append(g.kind)
    if kinds:
        raise ConfigurationError(
            f"--group {group_id}: a {kinds[0]} group; a Compute Backend Config needs a unicore or firecrest group"
        )
    known = [g.id for g in cfg.groups if isinstance(g, (UnicoreGroup, FirecrestGroup)) and g.id]
    where = f" in {cfg.path}" if cfg.path else ""
    raise ConfigurationError(
        f"--group {group_id}: no unicore or firecrest group with that id{where}"
        + (f"; known: {', '.join(known)}" if known else "")
    )


def plan_run(
    project_dir: str | os.PathLike[str],
    *,
    entry: str = "main",
    params: Sequence[str] = (),
    backend_config: str | os.PathLike[str] | None = None,
    requirement: str | None = None,
    config: Any = None,
    group: str | None = None,
    account: str | None = None,
    pass_env: Sequence[str] = (),
    workdir: str | os.PathLike[str] = DEFAULT_WORKDIR,
    environ: Mapping[str, str] | None = None,
) -> RunPlan:
    """Check every input of a run and decide what it sends; nothing is contacted."""
    env_vars = os.environ if environ is None else environ
    if (backend_config is None) == (requirement is None):
        raise LaunchersError("give exactly one of --backend-config FILE and -r REQUIREMENT")
    if group is not None and backend_config is None:
        raise LaunchersError(
            "--group names the site of a Compute Backend Config; use it with --backend-config"
        )
    project_path = Path(project_dir)
    project = load_mlproject(project_path)
    ep = project.entry_point(entry)
    given = parse_param_args(params)
    notes = [
        f"MLproject: {k} is not used (the environment is the Compute Backend Config's Environment)"
        for k in project.unused
    ]
    notes += [*project.warnings, *ep.warnings, *value_notes(ep, given)]

    backend: BackendConfig | None = None
    launcher: Any = None
    site: Site | None = None
    environment = Environment()
    block: Block = EMPTY
    resources: Resources | None = None
    sbatch: tuple[tuple[str, str | bool], ...] = ()
    if backend_config is not None:
        grp = _find_group(config, group) if group is not None else None
        backend = load_backend_config(backend_config, account=account, group=grp, environ=env_vars)
        kind = backend.site_kind or "unicore"
        site, environment, resources = backend.site, backend.environment, backend.resources
        if isinstance(grp, (UnicoreGroup, FirecrestGroup)):
            block = grp.job_environment
            problem = mixed_forms(
                environment,
                block,
                f"the environment: of group {grp.label!r}",
                theirs="the file's Environment",
            )
            if problem:
                raise ConfigurationError(problem, file=str(backend_config), key="Environment")
        acct = backend.account
        rules = backend.exclude
        if kind in ("firecrest", "unicore"):
            gpu_option = grp.gpu_option if isinstance(grp, FirecrestGroup) else "gpus-per-node"
            sbatch = sbatch_pairs(resources, acct, gpu_option)
        elif kind == "ssh":
            launcher = to_launcher(
                backend
            )  # Slurm over SSH: the Resources become its sbatch options
    else:
        # lazy: the configuration loader and the finder only when a run needs them (import time of launchers run)
        from ..finder.search import find_launcher

        assert requirement is not None
        launcher = find_launcher(requirement, config=config)
        if account and hasattr(launcher, "options") and hasattr(launcher, "config"):
            launcher = launcher.config(account=account)  # --account wins over the finder's
        kind = launcher.kind
        rules = ExcludeRules()
        grp_value = getattr(launcher, "group", None)
        finder_account = getattr(getattr(launcher, "options", None), "account", None)
        acct = account or finder_account
        if isinstance(grp_value, (UnicoreGroup, FirecrestGroup)):
            site = grp_value.site
            acct = acct or resolve_account(None, site, env_vars)
            if grp_value.environment:
                environment = validate_environment(
                    grp_value.environment,
                    None,
                    f"{kind}.{grp_value.label}.environment",
                    site_kind=kind,
                )
            else:
                block = launcher_environment(launcher)
            resources = resources_from_options(launcher.options)
            sbatch = finder_pairs(launcher.sbatch_args(), acct)

    if isinstance(site, UnicoreSite) and site.gpu_resource_name != "GPUsPerNode":
        notes.append(
            f"site.gpu_resource_name {site.gpu_resource_name!r} is not used: UNICORE runs get their "
            "GPUs from #SBATCH lines of their BSS file"
        )
    uploads = (
        collect_uploads(project_path, rules)
        if kind in REMOTE_KINDS
        else collect_uploads(project_path, ExcludeRules())
    )
    excluded = {e.relpath: e.pattern for e in uploads.excluded}
    problems = check_project_paths(environment, project_path, uploads.paths, excluded)
    if kind == "firecrest":
        problems += firecrest_name_problems(uploads)
    if problems:
        raise ConfigurationError(problems[0], problems=problems)
    image = _image_upload(environment, project_path, rules)
    if kind == "firecrest" and image is not None and "'" in image.relpath:
        raise ConfigurationError(
            f"{image.relpath}: firecREST cannot create a file whose name contains ' (its "
            "server quotes paths with ' in shell commands and fails); rename the image"
        )
    if image is not None and image.note:
        notes.append(f"{image.relpath}: {image.note}")

    cmd = build_command(ep, given, uploads.paths)
    exports = tuple(
        passed_environment(
            env_vars,
            pass_env,
            environment.variable_names | {n for n, _ in block.variables or ()},
        )
    )
    name = sanitize_name(ep.name[:-3] if ep.name.endswith((".py", ".sh")) else ep.name)
    cwd = None if kind in REMOTE_KINDS else str(project_path.resolve())
    task = command(["bash", "-c", cmd], name=name, env=dict(exports), cwd=cwd)
    return RunPlan(
        project=project,
        entry=ep,
        params=dict(given),
        command=cmd,
        kind=kind,
        task=task,
        workdir=Path(workdir),
        uploads=uploads,
        image=image,
        environment=environment,
        block=block,
        site=site,
        resources=resources,
        account=acct,
        exports=exports,
        backend=backend,
        launcher=launcher,
        sbatch=sbatch,
        notes=tuple(notes),
    )


def firecrest_name_problems(uploads: UploadSet) -> list[str]:
    """Project paths that firecREST cannot write: it puts every path between single quotes in a
    shell command, so a ``'`` ends in a 500 halfway through the upload (docs/remote-sites.md)."""
    return [
        f"{u.relpath}: firecREST cannot create a file whose path contains ' (its server quotes paths "
        "with ' in shell commands and fails); rename it, or leave it out with Exclude"
        for u in uploads.uploads
        if "'" in u.relpath
    ]


def _image_upload(env: Environment, project_dir: Path, rules: ExcludeRules) -> Upload | None:
    """The local Apptainer image, sent to the run directory's root under its file name."""
    app = env.apptainer
    if app is None or not app.is_local:
        return None
    local = (project_dir / app.path).resolve()
    note = "Apptainer image, uploaded to the run directory's root"
    try:
        rel = local.relative_to(project_dir.resolve()).as_posix()
    except ValueError:
        rel = None
    if rel is not None and rules.is_excluded(rel):
        note += " even though Exclude matches it"
    elif rel == app.image_name:
        return None  # a project file at the root: uploaded with the project
    return Upload(local, app.image_name, local.stat().st_size, note)
