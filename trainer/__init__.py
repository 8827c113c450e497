"""train.py's pieces, one concern per module (train.py itself holds the training loop):

    cli          the flags, each model's defaults, and the checks made before jax is imported
    data         image datasets, the text corpus, the loader a resumed run replays exactly
    build        device(s), model, optimizer and learning-rate schedule from the flags
    evaluate     fixed-shape evaluation batches; what --sample prints
    checkpoints  writing, finding and reading back checkpoints; the resume command
    progress     the progress bar or log lines while training
    report       the closing summary, --metrics-json and --plot

User code like train.py and models/: run from the checkout (`python train.py`), not installed
with the flowlite package. Nothing here imports flowlite or jax at module level.
"""
