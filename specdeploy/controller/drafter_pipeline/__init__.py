"""The drafter pipeline (issue 17): train the EAGLE-3 drafter for the target a node serves.

    make drafter DRAFTER_CONFIG=inventory/production/drafter-pipeline.yml
    python -m specdeploy.controller.drafter_pipeline run --config FILE

Steps, one module each, each resumable from its state file (workdir.py):

1. generate.py   responses from the target through the serving release's OpenAI API
2. extract.py    hidden states at the aux layer ids through the same vLLM (vllm_worker.py,
                 the release's Python); free space checked first
3. convention.py the training states vs. what the serving path hands the drafter (numeric;
                 a mismatch stops the run naming the offset)
4. train.py      plain-PyTorch EAGLE-3 training (torch_worker.py, the training venv)
                 ``train_processes: N`` runs it under torchrun with DistributedDataParallel
                 (one GPU a rank; gloo on CPU): the one-process result up to float summation
                 order (CI: within 1e-5 of the weights, tests/unit/test_drafter_training.py)
5. convert       vLLM's checkpoint format (checkpoint.py) + held-out acceptance
6. pipeline.py   specdeploy-drafter.json (specdeploy.controller.drafter_provenance), output

Knobs: spec.yml (typed). What runs where: the orchestrator is stdlib + PyYAML (CI covers it
on the controller); vllm_worker.py needs the release's vLLM on a GPU; torch_worker.py needs
torch (CPU works, for tiny models).
"""
