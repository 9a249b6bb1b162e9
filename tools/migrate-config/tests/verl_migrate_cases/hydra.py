from verl_migrate_cases import noop, warned

CASES = [
    warned(
        "hydra-searchpath-verl",
        """
        defaults:
          - diffusion_trainer
          - _self_
        hydra:
          searchpath:
            - file://configs
            - pkg://verl.trainer.config
        """,
    ),
    warned(
        "hydra-searchpath-verl",
        """
        python3 -m verl.trainer.main_flowgrpo hydra.searchpath=[file://verl/trainer/config] trainer.nnodes=1
        """,
        fmt="script",
    ),
    noop(
        "hydra-searchpath-verl",
        """
        defaults:
          - diffusion_trainer
          - _self_
        hydra:
          searchpath:
            - pkg://verl_omni.trainer.config
            - file://my_verl_configs
        """,
    ),
]
