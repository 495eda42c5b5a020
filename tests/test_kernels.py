"""lmpipe's compiled kernels: the word2vec SGD op against the reference algorithm, its errors,
and what happens where a kernel cannot be built."""

import pathlib
import platform
import re
import shutil
import subprocess
import threading

import numpy as np
import pytest
import tensorflow as tf

from lmpipe import kernels
from lmpipe.datasets import MaskedLMMasker
from lmpipe.models.word2vec import sequential_sgd_step
from lmpipe.pipelines.word2vec import Word2Vec

needs_compiler = pytest.mark.skipif(
    kernels.compiler() is None, reason="no C++ compiler to build lmpipe's kernels"
)


def reference_sgd(syn0, syn1, ids, mask, candidates, weights, learning_rate):
    """word2vec.c's negative-sampling update (CBOW with cbow_mean=1), example by example, in
    float64 numpy: the algorithm the kernel implements."""
    syn0, syn1, loss = syn0.astype(np.float64), syn1.astype(np.float64), 0.0
    for p in range(len(candidates)):
        row_mask = np.ones(1) if mask is None else mask[p]
        context = np.atleast_1d(ids[p])
        if row_mask.sum() == 0:
            continue
        hidden = (syn0[context] * row_mask[:, None]).sum(0) / row_mask.sum()
        error = np.zeros_like(hidden)
        for k, word in enumerate(candidates[p]):
            if weights[p, k] == 0:
                continue
            score = hidden @ syn1[word]
            label = float(k == 0)
            loss += weights[p, k] * np.logaddexp(0.0, -score if k == 0 else score)
            g = weights[p, k] * (label - 1.0 / (1.0 + np.exp(-score))) * learning_rate
            error += g * syn1[word]
            syn1[word] += g * hidden
        for word, m in zip(context, row_mask, strict=True):
            syn0[word] += m * error
    return syn0, syn1, loss


def random_batch(rng, method, examples=60, vocabulary=12, candidates=6, contexts=4):
    """A batch over a small vocabulary, so that rows repeat within it (the case a summed update
    gets wrong), with some noise words and context slots weighing 0."""
    weights = (rng.random((examples, candidates)) > 0.15).astype(np.float32)
    weights[-3:] = 0  # padding examples
    features = {
        "candidate_ids": rng.integers(0, vocabulary, (examples, candidates)).astype(np.int32),
        "candidate_weights": weights,
    }
    if method == "skipgram":
        features["input_ids"] = rng.integers(0, vocabulary, examples).astype(np.int32)
    else:
        features["input_ids"] = rng.integers(0, vocabulary, (examples, contexts)).astype(np.int32)
        mask = (rng.random((examples, contexts)) > 0.3).astype(np.float32)
        mask[5] = 0  # an example without context changes nothing
        features["input_mask"] = mask
    return features


@needs_compiler
@pytest.mark.parametrize("method", ["skipgram", "cbow"])
def test_word2vec_kernel_is_the_reference_algorithm_example_by_example(method):
    rng = np.random.default_rng(0)
    syn0 = rng.normal(0, 0.3, (12, 37)).astype(np.float32)  # 37: not a multiple of the lanes
    syn1 = rng.normal(0, 0.3, (12, 37)).astype(np.float32)
    features = random_batch(rng, method)
    input_table, output_table = tf.Variable(syn0), tf.Variable(syn1)
    held = input_table.read_value()  # a reader's tensor must not change under it
    loss, examples = tf.function(sequential_sgd_step)(input_table, output_table, features, 0.4)

    expected = reference_sgd(
        syn0,
        syn1,
        features["input_ids"],
        features.get("input_mask"),
        features["candidate_ids"],
        features["candidate_weights"],
        0.4,
    )
    np.testing.assert_allclose(input_table.numpy(), expected[0], rtol=0, atol=2e-6)
    np.testing.assert_allclose(output_table.numpy(), expected[1], rtol=0, atol=2e-6)
    assert float(loss) == pytest.approx(expected[2], rel=1e-6)
    assert int(examples) == int((features["candidate_weights"][:, 0] > 0).sum())
    assert np.abs(output_table.numpy() - syn1).max() > 0.05  # it learned something
    np.testing.assert_array_equal(held.numpy(), syn0)


@needs_compiler
def test_word2vec_kernel_names_an_id_outside_the_tables():
    features = random_batch(np.random.default_rng(1), "skipgram")
    features["candidate_ids"][3, 2] = 12
    tables = tf.Variable(tf.zeros([12, 8])), tf.Variable(tf.zeros([12, 8]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"candidate_ids\[20\] = 12"):
        sequential_sgd_step(*tables, features, 0.1)


SENTENCES = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 30
SMALL = {"vector_size": 8, "window": 2, "min_count": 1, "seed": 3}


@pytest.fixture
def no_compiler(monkeypatch):
    """No C++ compiler where the kernel is looked for (a command that does not exist)."""
    monkeypatch.setenv("CXX", "lmpipe-test-no-such-compiler")
    kernels._load_once.cache_clear()
    yield
    kernels._load_once.cache_clear()


def test_without_a_compiler_auto_trains_batched_and_warns_why(no_compiler):
    pipe = Word2Vec(**SMALL)
    with pytest.warns(RuntimeWarning, match="word2vec_sgd kernel is unavailable"):
        pipe.fit(SENTENCES, epochs=1, verbose=False)
    assert pipe.update == "batched"
    with pytest.raises(kernels.KernelUnavailableError, match="lmpipe-test-no-such-compiler"):
        Word2Vec(update="sequential", **SMALL).fit(SENTENCES, epochs=1, verbose=False)


def test_without_a_compiler_masking_warns_once_and_gives_the_same_masks(no_compiler):
    masker = MaskedLMMasker(100, 3, [0, 1, 2, 3], selection_rate=0.3)
    rows = np.random.default_rng(0).integers(4, 100, (8, 30)).astype(np.int32)
    kernels._warn_once.cache_clear()
    with pytest.warns(RuntimeWarning, match="masked_lm kernel is unavailable") as caught:
        fallback = masker(rows, [4, 2])
        masker(rows, [4, 3])
    assert len([w for w in caught if "masked_lm" in str(w.message)]) == 1
    with kernels.ops_only():
        reference = masker(rows, [4, 2])
    for key in reference:
        np.testing.assert_array_equal(fallback[key].numpy(), reference[key].numpy())


def test_ops_only_holds_in_its_thread_and_nests():
    seen_elsewhere = []
    with kernels.ops_only():
        with kernels.ops_only():
            assert kernels.optional_kernel("masked_lm") is None
        assert kernels.optional_kernel("masked_lm") is None
        other = threading.Thread(
            target=lambda: seen_elsewhere.append(kernels.optional_kernel("masked_lm"))
        )
        other.start()
        other.join()
    if kernels.compiler() is not None:
        assert seen_elsewhere[0] is not None  # another thread is not inside the context
        assert kernels.optional_kernel("masked_lm") is not None


def test_a_failing_compiler_is_reported_with_its_command(monkeypatch):
    monkeypatch.setenv("CXX", "false")
    kernels._load_once.cache_clear()
    try:
        with pytest.raises(kernels.KernelUnavailableError, match="`false --version ...` failed"):
            kernels.load_kernel("word2vec_sgd")
    finally:
        kernels._load_once.cache_clear()


@needs_compiler
def test_sequential_update_runs_on_one_device_only():
    pipe = Word2Vec(update="sequential", **SMALL)
    with pytest.raises(
        ValueError, match=r"update='sequential'\) runs on one device.*got MirroredStrategy"
    ):
        pipe.fit(SENTENCES, epochs=1, strategy="mirrored", verbose=False)
    auto = Word2Vec(**SMALL)
    auto.fit(SENTENCES, epochs=1, strategy="mirrored", verbose=False)
    assert auto.update == "batched"


def test_update_must_be_one_of_the_three():
    with pytest.raises(ValueError, match=r"`update` must be one of .*'sequential'.*got 'hogwild'"):
        Word2Vec(update="hogwild")


# One build for every CPU: baseline, AVX2 and AVX-512 code in one library, chosen when it runs.

INSTRUCTION_SETS = ["baseline", "avx2", "avx512"]


def widest_instruction_set():
    """The widest variant this CPU runs, as the kernels choose it (from /proc/cpuinfo)."""
    flags = kernels.cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "baseline"


def expected_instruction_set(cap):
    widest = widest_instruction_set()
    return min(cap, widest, key=INSTRUCTION_SETS.index)


@needs_compiler
@pytest.mark.parametrize("instruction_set", INSTRUCTION_SETS)
@pytest.mark.parametrize(
    "shape, rate, dtype, seed",
    [
        ((4, 130, 67), 0.1, "float32", (5, 9)),  # sharded across threads, ragged chunks
        ((1001, 3), 0.3, "bfloat16", (-1, 2**31 - 1)),  # 16-bit elements, odd count
        ((129,), 1e-4, "float64", (2**31 - 1, -(2**31))),  # 32-bit words, 64-bit elements
        ((3,), 0.5, "float16", (0, 0)),  # fewer elements than one Philox block
    ],
)
def test_every_instruction_set_gives_the_ops_dropout_mask(
    shape, rate, dtype, seed, instruction_set
):
    from lmpipe.layers.dropout import _comparison, scaled_keep_mask

    module = kernels.load_kernel("dropout_mask")
    chosen = module.lmpipe_dropout_mask_instruction_set(instruction_set=instruction_set)
    assert chosen.numpy().decode() == expected_instruction_set(instruction_set)
    seed = tf.constant(seed, tf.int32)
    bits, threshold = _comparison(rate)
    scale = tf.cast(1.0 / (1.0 - rate), dtype)
    compiled = module.lmpipe_dropout_mask(
        tf.constant(shape, tf.int32),
        seed,
        scale,
        threshold=threshold,
        bits=bits,
        instruction_set=instruction_set,
    )
    with kernels.ops_only():
        reference = scaled_keep_mask(tf.constant(shape, tf.int32), rate, seed, dtype)
    np.testing.assert_array_equal(
        tf.bitcast(compiled, tf.uint8).numpy(), tf.bitcast(reference, tf.uint8).numpy()
    )


@needs_compiler
@pytest.mark.parametrize("method", ["skipgram", "cbow"])
def test_word2vec_kernel_gives_the_same_bits_with_every_instruction_set(method):
    module = kernels.load_kernel("word2vec_sgd")
    rng = np.random.default_rng(7)
    syn0 = rng.normal(0, 0.3, (12, 53)).astype(np.float32)  # 53: vector lanes and a remainder
    syn1 = rng.normal(0, 0.3, (12, 53)).astype(np.float32)
    features = random_batch(rng, method)
    results = {}
    for instruction_set in INSTRUCTION_SETS:
        chosen = module.lmpipe_word2vec_sgd_instruction_set(instruction_set=instruction_set)
        assert chosen.numpy().decode() == expected_instruction_set(instruction_set)
        input_table, output_table = tf.Variable(syn0), tf.Variable(syn1)
        loss, _ = module.lmpipe_word2vec_sgd(
            input_table.handle,
            output_table.handle,
            features["input_ids"],
            features.get("input_mask", np.zeros([0], np.float32)),
            features["candidate_ids"],
            features["candidate_weights"],
            0.4,
            instruction_set=instruction_set,
        )
        results[instruction_set] = (input_table.numpy(), output_table.numpy(), float(loss))
    baseline = results.pop("baseline")
    assert np.abs(baseline[1] - syn1).max() > 0.05  # it learned something
    for tables_and_loss in results.values():
        np.testing.assert_array_equal(tables_and_loss[0], baseline[0])
        np.testing.assert_array_equal(tables_and_loss[1], baseline[1])
        assert tables_and_loss[2] == baseline[2]


def compile_loop(loop, output, *flags, compiler=None):
    """Compile the loop source `loop` as lmpipe builds it (plus `flags`) into `output`."""
    source = pathlib.Path(kernels.KERNEL_DIRECTORY) / loop
    command = [compiler or kernels.compiler(), "-c", *kernels.LOOP_FLAGS, *flags, str(source)]
    subprocess.run([*command, "-o", str(output)], check=True)


def wide_registers(obj):
    """{function: the 256- and 512-bit registers (ymm, zmm) it uses} of an object file."""
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", str(obj)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wide, function = {}, None
    for line in listing.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if header:
            function = header.group(1)
            wide[function] = set()
        elif function is not None:
            wide[function].update(re.findall(r"%([yz]mm)\d+", line))
    return wide


LOOPS = ["dropout_mask_loop.cc", "word2vec_sgd_loop.cc"]
needs_x86_toolchain = pytest.mark.skipif(
    kernels.compiler() is None or shutil.which("objdump") is None or platform.machine() != "x86_64",
    reason="needs a C++ compiler and objdump on x86-64",
)


@needs_x86_toolchain
@pytest.mark.parametrize("loop", LOOPS)
def test_only_a_loops_avx_variants_hold_avx_instructions(tmp_path, loop):
    """The loops are compiled without -march: the code outside the functions named for AVX2
    and AVX-512 uses no 256- or 512-bit register, so it runs on any x86-64 CPU."""
    compile_loop(loop, tmp_path / "loop.o")
    wide = wide_registers(tmp_path / "loop.o")
    assert any("Avx512" in name and "zmm" in found for name, found in wide.items()), wide
    assert any("Avx2" in name and "ymm" in found for name, found in wide.items()), wide
    baseline = {name for name, found in wide.items() if found and "Avx" not in name}
    assert not baseline, baseline


@needs_x86_toolchain
@pytest.mark.parametrize("loop", LOOPS)
def test_a_loop_builds_its_baseline_alone_as_on_other_architectures(tmp_path, loop):
    compile_loop(loop, tmp_path / "loop.o", "-DLMPIPE_BASELINE_ONLY")
    wide = wide_registers(tmp_path / "loop.o")
    assert not any("Avx" in name or found for name, found in wide.items()), wide


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-g++") is None, reason="no aarch64 cross compiler"
)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_loop_builds_for_aarch64(tmp_path, loop):
    compile_loop(loop, tmp_path / "loop.o", compiler="aarch64-linux-gnu-g++")
    header = (tmp_path / "loop.o").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # AArch64


def test_the_cache_key_does_not_depend_on_the_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("LMPIPE_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "lmpipe-test-fake-compiler")  # not on the PATH: no --version run
    kernels._usable_directory.cache_clear()
    try:
        keys = set()
        for flags in (frozenset(), frozenset({"sse2"}), frozenset({"avx2", "avx512f"})):
            monkeypatch.setattr(kernels, "cpu_flags", lambda flags=flags: flags)
            keys.add(kernels.cache_entry("dropout_mask").key)
        assert len(keys) == 1
        monkeypatch.setattr(platform, "machine", lambda: "aarch64")  # another architecture
        assert kernels.cache_entry("dropout_mask").key not in keys
    finally:
        kernels._usable_directory.cache_clear()


def test_every_kernel_source_ships_with_the_package():
    """`pip install` copies the sources (it compiles nothing): each file a kernel's build
    reads is in the package data setup.cfg declares."""
    import configparser
    import fnmatch

    setup = configparser.ConfigParser()
    setup.read(pathlib.Path(__file__).resolve().parents[1] / "setup.cfg")
    patterns = [p.strip() for p in setup["options.package_data"]["lmpipe"].split(",")]
    for name, parts in kernels.KERNELS.items():
        for source in (file for files in parts for file in files):
            assert (pathlib.Path(kernels.KERNEL_DIRECTORY) / source).is_file(), source
            assert any(fnmatch.fnmatch(f"kernels/{source}", p) for p in patterns), (name, source)
    assert "ext_modules" not in setup["options"]
