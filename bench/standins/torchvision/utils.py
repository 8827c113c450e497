"""save_image writes an empty file where the image would go (the benchmark reads no images)."""


def save_image(tensor, fp, *args, **kwargs):
    with open(fp, "wb"):
        pass


def make_grid(tensor, *args, **kwargs):
    return tensor
