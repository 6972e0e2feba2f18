"""The command and source patterns of the audit (rules 2, 3, 4): what an agent types to break a rule is found,
what it types to work (search, read, run its scripts) is not. Each case is a command line written by hand."""

from __future__ import annotations

import pytest

from bench.rules.conduct import FETCH, INSTALL, PRETRAINED, PYTHON_FETCH

INSTALLS = [
    "pip install --target ./pkgs six",
    "pip -q install timm",
    "python -m pip install lightgbm",
    "python3.11 -m pip install --user xgboost",
    "cd /tmp && pip3 install einops",
    "uv pip install torch-geometric",
    "uv add polars",
    "conda install -y scikit-learn",
    "npm install left-pad",
    "sudo apt-get install -y htop",
    "VAR=1 pip download six -d wheels",
    "/usr/bin/pip install six",
    "python setup.py develop",
]
NOT_INSTALLS = [
    "python run_1.py --epochs 3",
    "grep -rn 'pip install' program.md",
    "echo 'do not pip install anything'",
    "pip list",
    "pip show torch",
    "cat requirements.txt",
]
FETCHES = [
    "curl -s https://example.com/weights.pth -o w.pth",
    "wget https://download.pytorch.org/models/resnet18.pth",
    "cd models && git clone https://github.com/huggingface/pytorch-image-models",
    "huggingface-cli download facebook/dinov2-small",
    "ls; curl example.com",
    "$(curl -s example.com)",
]
NOT_FETCHES = ["grep curl notes.txt", "echo use wget later", "git status", "git diff train.py", "python curl_like.py"]
PRETRAINEDS = [
    "model = AutoModel.from_pretrained('bert-base-uncased')",
    "m = torch.hub.load('facebookresearch/dinov2', 'dinov2_vits14')",
    "timm.create_model('resnet18', pretrained=True)",
    "resnet18(weights='IMAGENET1K_V1')",
    "resnet18(weights=ResNet18_Weights.DEFAULT)",
    "path = hf_hub_download('org/model', 'model.safetensors')",
]
NOT_PRETRAINEDS = [
    'config = {"pretrained": weights_path("convnext_tiny")}',  # T3's provided DINOv3 file, loaded by torch.load
    "load_backbone_weights(model.backbone, config['pretrained'])",
    "timm.create_model('resnet18', pretrained=False)",
]


@pytest.mark.parametrize("command", INSTALLS)
def test_installs_are_found(command):
    assert INSTALL.search(command)


@pytest.mark.parametrize("command", NOT_INSTALLS)
def test_commands_about_packages_are_not_installs(command):
    assert not INSTALL.search(command)


@pytest.mark.parametrize("command", FETCHES)
def test_fetches_are_found(command):
    assert FETCH.search(command)


@pytest.mark.parametrize("command", NOT_FETCHES)
def test_words_that_name_a_fetch_tool_are_not_fetches(command):
    assert not FETCH.search(command)


@pytest.mark.parametrize("line", PRETRAINEDS)
def test_hub_calls_are_found(line):
    assert PRETRAINED.search(line)


@pytest.mark.parametrize("line", NOT_PRETRAINEDS)
def test_provided_weights_and_random_inits_are_not_hub_calls(line):
    assert not PRETRAINED.search(line)


def test_http_clients_in_sources_are_found():
    assert PYTHON_FETCH.search("urllib.request.urlretrieve(URL, 'w.pth')")
    assert PYTHON_FETCH.search("r = requests.get(url)")
    assert not PYTHON_FETCH.search("x = load_split('val', data_dir)")
