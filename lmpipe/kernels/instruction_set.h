// Which vector instructions a kernel's loop runs with, chosen when it runs rather than when it
// is built: the loops are compiled for baseline x86-64 (or whatever the target architecture's
// baseline is), with AVX2 and AVX-512 variants of their hot functions beside it (gcc's and
// clang's `target` attribute), so that one build serves every x86-64 CPU and can be copied to
// another machine.
//
// An op takes an `instruction_set` attribute ("auto", "avx512", "avx2", "baseline"): the widest
// variant this CPU and its operating system run, at most the one named. "auto" is the widest;
// the others let one machine run (and test) the narrower paths.

#ifndef LMPIPE_KERNELS_INSTRUCTION_SET_H_
#define LMPIPE_KERNELS_INSTRUCTION_SET_H_

#include <cstring>

// -DLMPIPE_BASELINE_ONLY builds the baseline alone, as on other architectures (the tests build
// that path so on x86-64 too).
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(LMPIPE_BASELINE_ONLY)
#define LMPIPE_X86_VARIANTS 1
// The extensions of each variant (AVX-512: x86-64-v4's, those of every AVX-512 CPU).
#define LMPIPE_TARGET_AVX2 __attribute__((target("avx2")))
#define LMPIPE_TARGET_AVX512 \
  __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl")))
#else
#define LMPIPE_X86_VARIANTS 0
#endif

namespace lmpipe {

enum class InstructionSet { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The name the `instruction_set` attribute uses.
inline const char* InstructionSetName(InstructionSet set) {
  switch (set) {
    case InstructionSet::kAvx512:
      return "avx512";
    case InstructionSet::kAvx2:
      return "avx2";
    default:
      return "baseline";
  }
}

// The widest variant this CPU runs (its operating system saving the registers included:
// __builtin_cpu_supports checks both).
inline InstructionSet WidestInstructionSet() {
#if LMPIPE_X86_VARIANTS
  static const InstructionSet widest = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
      return InstructionSet::kAvx512;
    }
    if (__builtin_cpu_supports("avx2")) return InstructionSet::kAvx2;
    return InstructionSet::kBaseline;
  }();
  return widest;
#else
  return InstructionSet::kBaseline;
#endif
}

// The variant to run for the attribute value `name`: the widest this CPU runs, at most `name`.
inline InstructionSet ChooseInstructionSet(const char* name) {
  InstructionSet cap = InstructionSet::kAvx512;
  if (std::strcmp(name, "avx2") == 0) cap = InstructionSet::kAvx2;
  if (std::strcmp(name, "baseline") == 0) cap = InstructionSet::kBaseline;
  const InstructionSet widest = WidestInstructionSet();
  return static_cast<int>(cap) < static_cast<int>(widest) ? cap : widest;
}

}  // namespace lmpipe

#endif  // LMPIPE_KERNELS_INSTRUCTION_SET_H_
