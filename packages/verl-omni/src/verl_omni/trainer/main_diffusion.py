"""`python -m verl_omni.trainer.main_diffusion`: upstream verl-omni's module name for `verl-omni-train`."""

from verl_omni.trainer.main import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    main()
