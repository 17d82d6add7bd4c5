"""Encoders of every kind: Keras always, ONNX where onnxruntime is installed (CI installs
it), PyTorch where torch is; one small model (a convolution and a pooling) built in each
from the same weights gives the same latents, and each kind gives exactly what its own
library gives when called directly."""
import os
import sys

import keras
import numpy as np
import pytest
from helpers import job_line, read_dataset_json, read_examples, run_job, staged_files
from input_files import write_frame_folder, write_manifest

from beam_jobs import make_shards
from beam_jobs.encoders import EncoderSpec, load_encoder, model_input

pytestmark = pytest.mark.slow   # models of every kind, and builds with them


H, W, C, OUT = 24, 32, 3, 4
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((3, 3, C, OUT)).astype(np.float32) * 0.3,   # HWIO
            rng.standard_normal(OUT).astype(np.float32) * 0.1)


@pytest.fixture(scope="module")
def models(tmp_path_factory, weights):
    """The model in every kind this machine can build: name -> (path, layout)."""
    kernel, bias = weights
    directory = tmp_path_factory.mktemp("kinds")
    made = {}
    model = keras.Sequential([keras.Input((H, W, C)), keras.layers.Conv2D(OUT, 3, strides=2),
                              keras.layers.GlobalAveragePooling2D()])
    model.layers[0].set_weights([kernel, bias])
    model.save(directory / "enc.keras")
    made["keras"] = (str(directory / "enc.keras"), "channels_last")
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        onnx = None
    if onnx is not None:
        graph = helper.make_graph(
            [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["y"], ["p"]),
             helper.make_node("Flatten", ["p"], ["latent"])], "enc",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", C, H, W])],
            [helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["batch", OUT])],
            [numpy_helper.from_array(kernel.transpose(3, 2, 0, 1).copy(), "w"),
             numpy_helper.from_array(bias, "b")])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                  directory / "enc.onnx")
        made["onnx"] = (str(directory / "enc.onnx"), "channels_first")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(C, OUT, 3, stride=2)

            def forward(self, x):
                return self.conv(x).mean(dim=(2, 3))

        module = Encoder().eval()
        with torch.no_grad():
            module.conv.weight.copy_(torch.from_numpy(kernel.transpose(3, 2, 0, 1).copy()))
            module.conv.bias.copy_(torch.from_numpy(bias))
        example = torch.zeros(2, C, H, W)
        torch.jit.trace(module, example).save(str(directory / "enc.pt"))
        program = torch.export.export(module, (example,),
                                      dynamic_shapes=({0: torch.export.Dim("batch")},))
        torch.export.save(program, str(directory / "enc.pt2"))
        made["torchscript"] = (str(directory / "enc.pt"), "channels_first")
        made["torch_export"] = (str(directory / "enc.pt2"), "channels_first")
    return made


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    directory = tmp_path_factory.mktemp("frames")
    images = np.random.default_rng(3).integers(0, 255, (9, H, W, C), dtype=np.uint8)
    write_frame_folder(directory / "v", images)
    return write_manifest(directory / "m.jsonl", [{"video_id": "v", "frames": "v"}]), images


def _latents(out) -> np.ndarray:
    """The latents of every frame of video v, from its windows of 3 every 3."""
    examples = sorted(read_examples(out), key=lambda e: e["start"])
    return np.concatenate([e["window"] for e in examples])


def _direct(kind: str, path: str, x: np.ndarray) -> np.ndarray:
    """The model called with its own library, on the job's input x."""
    if kind == "keras":
        return keras.ops.convert_to_numpy(keras.saving.load_model(path)(x, training=False))
    if kind == "onnx":
        import onnxruntime as ort
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]
    import torch
    module = torch.export.load(path).module() if kind == "torch_export" else torch.jit.load(path)
    with torch.inference_mode():
        return module(torch.from_numpy(x)).numpy()


def test_every_kind_gives_the_same_latents_and_its_own_librarys(tmp_path, models, frames):
    manifest, images = frames
    latents = {}
    for kind, (path, layout) in models.items():
        out = tmp_path / kind
        run_job(manifest, out, "--window", "3", "--stride", "3", "--encoder", path,
                "--encoder_layout", layout, "--encoder_batch_size", "4")
        latents[kind] = _latents(out)
        spec = EncoderSpec(path, layout=layout)
        direct = np.concatenate([_direct(kind, path, model_input(images[i:i + 4], spec))
                                 for i in range(0, 9, 4)])
        np.testing.assert_array_equal(latents[kind], direct, err_msg=kind)
        meta = read_dataset_json(out)["encoder"]
        assert meta["kind"] == kind and meta["devices_used"] == ["cpu"]
        assert meta["library"].split()[0] in ("keras", "onnxruntime", "torch")
        assert meta["layout"] == layout and meta["device_requested"] == "auto"
    for kind, values in latents.items():
        np.testing.assert_allclose(values, latents["keras"], atol=1e-5, err_msg=kind)
    assert latents["keras"].shape == (9, OUT)


def test_an_onnx_model_runs_with_onnxruntime(models):
    pytest.importorskip("onnxruntime")
    encoder = load_encoder(EncoderSpec(models["onnx"][0], device="cpu"))
    assert encoder.kind == "onnx" and encoder.library.startswith("onnxruntime ")
    assert encoder.device == "cpu"


def test_a_beam_model_handler_is_an_encoder(tmp_path, models, frames):
    from apache_beam.ml.inference.base import ModelHandler, PredictionResult

    class MeanColour(ModelHandler):
        def load_model(self):
            return lambda x: x.mean(axis=(0, 1))

        def run_inference(self, batch, model, inference_args=None):
            return [PredictionResult(x, model(x)) for x in batch]

    manifest, images = frames
    make_shards.run(["--input", manifest, "--output_dir", str(tmp_path / "own"), "--window",
                     "3", "--stride", "3"], encoder=MeanColour())
    expected = images.astype(np.float32).mean(axis=(1, 2)) / 255
    np.testing.assert_allclose(_latents(tmp_path / "own"), expected, atol=1e-6)
    meta = read_dataset_json(tmp_path / "own")["encoder"]
    assert meta["kind"] == "beam_handler" and meta["handler"] == "MeanColour"

    pytest.importorskip("onnxruntime")
    from apache_beam.ml.inference.onnx_inference import OnnxModelHandlerNumpy

    path, layout = models["onnx"]
    make_shards.run(["--input", manifest, "--output_dir", str(tmp_path / "beam_onnx"),
                     "--window", "3", "--stride", "3", "--encoder_layout", layout],
                    encoder=OnnxModelHandlerNumpy(path, providers=["CPUExecutionProvider"]))
    direct = _direct("onnx", path, model_input(images, EncoderSpec(path, layout=layout)))
    np.testing.assert_allclose(_latents(tmp_path / "beam_onnx"), direct, atol=1e-6)


def test_a_missing_library_or_device_is_named_before_any_work(tmp_path, models, frames,
                                                            capsys, monkeypatch):
    manifest, _ = frames

    def refused(name: str, model, *extra) -> str:
        return job_line(capsys, "--input", manifest, "--output_dir", tmp_path / name,
                        "--window", "3", "--encoder", model, *extra)

    (tmp_path / "model.onnx").write_bytes(b"x")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "onnxruntime", None)     # as if not installed
        assert "install with pip install -e '.[onnx]'" in refused("o1", tmp_path / "model.onnx")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "torch", None)
        assert "install with pip install -e '.[torch]'" in refused("o2", tmp_path / "enc.pt2")
    (tmp_path / "saved").mkdir()      # a SavedModel directory, like a .keras file, needs [tf]
    for model in (models["keras"][0], str(tmp_path / "saved")):
        with monkeypatch.context() as m:
            m.setitem(sys.modules, "tensorflow", None)
            last = refused("o4", model)
        assert "needs tensorflow" in last and "install with pip install -e '.[tf]'" in last
    assert "--encoder_device cuda" in refused("o3", models["keras"][0], "--encoder_device",
                                              "cuda")
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3", "o4"))


def test_a_dataflow_gpu_job_with_a_pytorch_or_onnx_encoder_builds(tmp_path, models, frames):
    """The flags of the README's GPU example, as a dry run: the graph builds and stages."""
    manifest, _ = frames
    kind = "torch_export" if "torch_export" in models else "onnx"
    if kind not in models:
        pytest.skip("neither torch nor onnxruntime is installed")
    path, layout = models[kind]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = make_shards.run([
            "--input", manifest, "--output_dir", "gs://test-bucket/gpu", "--window", "3",
            "--encoder", path, "--encoder_layout", layout, "--encoder_batch_size", "64",
            "--runner", "DataflowRunner", "--dry_run=True", "--project", "test-project",
            "--region", "us-central1", "--temp_location", "gs://test-bucket/tmp",
            "--setup_file", "./setup.py", "--machine_type", "n1-standard-8",
            "--experiments", "use_runner_v2", "--dataflow_service_options",
            "worker_accelerator=type:nvidia-tesla-t4;count:1;install-nvidia-driver",
            "--sdk_container_image", "us-docker.pkg.dev/my-project/images/beam-torch-gpu:2.77"])
    finally:
        os.chdir(cwd)
    names = {t.unique_name for t in result.job.proto_pipeline.components.transforms.values()}
    assert {"CutWindows", "WriteShards/GroupBuckets", "Finalize"} <= names
    environments = list(result.job.proto_pipeline.components.environments.values())
    assert any(b"beam-torch-gpu:2.77" in env.payload for env in environments)
    # the image holds the job's libraries (docker/): no requirements file besides
    assert "requirements.txt" not in staged_files(result.job.proto_pipeline)


def test_a_dataflow_job_with_a_keras_encoder_stages_tensorflow(tmp_path, models, frames):
    """Without a container image, a worker gets the job's libraries and the encoder's
    (TensorFlow for a .keras model) from the requirements file the job stages."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = make_shards.run([
            "--input", frames[0], "--output_dir", "gs://test-bucket/keras", "--window", "3",
            "--encoder", models["keras"][0], "--runner", "DataflowRunner", "--dry_run=True",
            "--project", "test-project", "--region", "us-central1",
            "--temp_location", "gs://test-bucket/tmp", "--setup_file", "./setup.py"])
    finally:
        os.chdir(cwd)
    with open(staged_files(result.job.proto_pipeline)["requirements.txt"]) as f:
        assert f.read().split() == ["av==18.1.0", "blake3==1.0.11", "gcsfs==2026.10.1",
                                    "tensorflow-cpu==2.21.0"]
