from prepare import save_checkpoint
from train import CONFIG, build_model

if __name__ == "__main__":
    model = build_model(CONFIG)

    class Wrapped(__import__("torch").nn.Module):  # what torch.compile's OptimizedModule does to the keys
        def __init__(self, m):
            super().__init__()
            self._orig_mod = m

    save_checkpoint(Wrapped(model), CONFIG, 0.5)
