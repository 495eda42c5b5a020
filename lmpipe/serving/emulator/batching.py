"""What TF Serving's server-side batching (`--enable_batching`) does to requests, simulated.

The server merges the requests of a batch into one run of the signature and splits the
outputs back (tensorflow_serving/batching/batching_session.cc, batching_util.cc):

1. With `pad_variable_length_inputs`, every input tensor of every request is padded after its
   values, in each dimension but the batch one, to the largest size among the requests; the
   padding value is the tensor's own first element (`input.flat<T>()(0)`), not zero.
   Without it, requests whose inputs differ beyond the batch dimension are refused.
2. When the merged batch is not one of `allowed_batch_sizes`, it is filled up to the next
   allowed size with copies of the first row of the last request.
3. Every input is concatenated along the batch dimension, the signature runs once, and every
   output is split along the batch dimension only, each request getting its rows as they are
   (with the merged run's sizes in the other dimensions).

A signature is safe to batch when `batched_outputs` equals what the requests give one by one.
"""

import numpy as np


def batched_outputs(run, requests, pad_variable_length_inputs=True, allowed_batch_sizes=None):
    """The outputs each request gets when the server batches `requests` into one run.

    Args:
        run: the signature, `{input name: array}` -> `{output name: array}`.
        requests: a list of `{input name: array}`, each with a batch dimension first.
        pad_variable_length_inputs: the server option (see the module docstring).
        allowed_batch_sizes: the server's `allowed_batch_sizes`, or None for any size.

    Returns:
        One `{output name: array}` per request.
    """
    names = sorted(requests[0])
    sizes = [len(request[names[0]]) for request in requests]
    merged = {}
    for name in names:
        tensors = [np.asarray(request[name]) for request in requests]
        largest = np.max([tensor.shape[1:] for tensor in tensors], axis=0).astype(int)
        padded = []
        for tensor in tensors:
            if tuple(tensor.shape[1:]) != tuple(largest):
                if not pad_variable_length_inputs:
                    raise ValueError(
                        f"Tensors with name '{name}' from different tasks have different "
                        "shapes and padding is turned off."
                    )
                extra = [int(m - s) for m, s in zip(largest, tensor.shape[1:], strict=True)]
                widths = [(0, 0)] + [(0, e) for e in extra]
                tensor = np.pad(tensor, widths, constant_values=tensor.flat[0])
            padded.append(tensor)
        total = sum(sizes)
        target = total
        if allowed_batch_sizes:
            target = min(size for size in allowed_batch_sizes if size >= total)
        padded += [padded[-1][:1]] * (target - total)
        merged[name] = np.concatenate(padded, axis=0)
    outputs = {name: np.asarray(value) for name, value in run(merged).items()}
    results, start = [], 0
    for size in sizes:
        results.append({name: value[start : start + size] for name, value in outputs.items()})
        start += size
    return results
