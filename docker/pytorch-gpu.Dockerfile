# Dataflow workers that run a PyTorch (or ONNX) encoder on a GPU.
#
#   docker build -f docker/pytorch-gpu.Dockerfile -t us-docker.pkg.dev/PROJECT/images/beam-torch-gpu:2.77 .
#   docker push us-docker.pkg.dev/PROJECT/images/beam-torch-gpu:2.77
#
# then run the job with --sdk_container_image pointing at it (README: "A frame encoder
# inside the job"). Beam's own image gives the SDK harness; PyTorch's CUDA wheels bring
# the CUDA runtime; the NVIDIA driver comes from Dataflow (install-nvidia-driver).
FROM apache/beam_python3.11_sdk:2.77.0

# PyTorch with CUDA 12.8 (the default wheels on PyPI), and onnxruntime with CUDA.
RUN pip install --no-cache-dir torch==2.13.0 onnxruntime-gpu==1.32.0 onnx==1.23.2

# The job itself, with what it imports ([beam]: PyAV, gcsfs; Beam is the image's own). A
# Keras or SavedModel encoder on a GPU needs TensorFlow too (its tensorflow[and-cuda] build).
COPY . /opt/video-window-shards
RUN pip install --no-cache-dir "/opt/video-window-shards[beam]"

ENTRYPOINT ["/opt/apache/beam/boot"]
