#!/usr/bin/env bash
# The pending device calls (branches written without a GPU, waiting to be measured), so that a session lent
# a device runs them without rewriting them. Here:
#   tools/dev_libs.sh $(tools/calls.sh libs)   # the libraries (.dev/, ~15-20 min for all on 2 cores)
#   tools/fetch_gpu_wheels.sh                  # .whl/ (pytest for the device), once
#   tools/calls.sh show                        # each call's run() arguments, in order of value
# On the device (the run tool, from the repository root): bash tools/calls.sh run N.
# Checks and timing are separate calls (tools/prefill_ab.sh: smoke test, tests, racecheck and memcheck of B;
# then A B A B timing with the SM clock logged), so that each fits the 600 s a call may run. A / B are
# libraries of .dev/ (or one library with KVATTN_AB_ENV_B switching B). A call runs from the checkout: put
# it at the branch whose tests and bench cases the call needs (the list says which): `git checkout --detach
# BRANCH` (a branch checked out in another worktree cannot be checked out by name; .dev/ and .whl/ are
# git-ignored and stay). The checkout's own copy of this script runs: a fix made on main after the branches
# were rebased needs `git checkout main -- tools/` in that checkout too.
set -uo pipefail
cd "$(dirname "$0")/.."

# NAME:BRANCH:HEAD_DIM (bf16 developer builds; tools/dev_libs.sh)
LIBS="ss64:seesaw:64 mlr64:mlarel:64 sy64:8b4c92f:64 sy256:8b4c92f:256 main256:9c0f715:256 main64:61f0ead:64 det128:det57:128 st128:start57:128 sy128:sync57:128 ew2x128:ewait2:128 ew128:ewait:128 ew64:ewait:64 do64:d64order:64 sp128:split128:128 ms64:mmasum:64 ms128:mmasum128:128 tm128:tma1w:128 tm64:tma1w:64 rv64:review50:64 rv128:review50:128 rv256:review50:256 dd64:dedup51:64 dd128:dedup51:128 dd256:dedup51:256 pt64:ptrim:64 kv256:kv256:256 tl64:main:64:-DKVATTN_PREFILL_TIMELINE=1 main128:main:128 clpad128:clpad:128 main192:main:192 wide512:wide:512 wide64:wide:64 mla4:mla4r:64 mla:main:64 e4m3dead128:e4m3dead:128 w3tl128:w3short:128:-DKVATTN_PREFILL_TIMELINE=1 sdec128:sdec:128 clu128:cluster:128 clutl128:cluster:128:-DKVATTN_DECODE_TIMELINE=1"

show() {
  cat << 'END'
Session 45 ran 64-69 (H100s only): branch clong landed (the cluster form for batch 1 past the capacity
bound where the card's DRAM bandwidth allows: H100 W1 b1 32k -13 to -17%); ptma (65, 66) lost, not merged.
Next, in order of value (bench/NOTES.md, "Where to go next", session 45): 71, best on an H200 (it decides
whether the H200 takes the cluster form too), then 72 (branch codd: 112 CTAs for b1 over 8 kv heads); 70
is 71 before the bandwidth rule (superseded, not run).
Entries 64-70 are the record of session 45's calls; 59-63 of session 44's.
Session 46 (the checkout came back without .dev/, .peerkit/ and branch codd: codd rewritten from its notes;
73 and the cluster_rate half of 74 ran on an H100: any size gave C = 9, slower; codd not merged; 75 and 76
ran on an H100: crule and cmerge landed; 77 W1's tp cases with FlashInfer; 78 and 79 never ran: no machine).
Next (NOTES, session 46): 79 (the combine's 4 warps a row, opt-in on main), 75 on an H200 with main's
library (crule's H200 prediction), 78 (where the tp cases' fixed cost goes). Libraries for them:
tools/dev_libs.sh cwide128:main:128 crule128:main:128 cmerge128:main:128 \
  cmergetl128:main:128:-DKVATTN_DECODE_TIMELINE=1   (78 also wants the tree's tools at main; 77 main128_46:945f185:128)
Session 47: 79, 78, 80, 82, 83 ran on H100s: the combine's 4 warps a row by default; csplit and cgpc landed
(S clusters of 8 a unit for few units of long sequences); cfuse (the in-kernel merge) slower, not merged;
81 superseded by 82's kernel_gaps (its timeline half never ran); 84 (branch ptouch) written, not run (no
machine). Next (NOTES, session 47): 83 with main's library as B on an H200 (tools/dev_libs.sh
main128_47:main:128, then edit 83's B), 84 on branch ptouch (tools/dev_libs.sh ptouch128:ptouch:128).
Session 48: 85 (cbatch: landed, 4/1 b4 32k -10%), 84 (ptouch: level, not merged) and 86 (branch cpf, its
entry there: the kernel's code prefetched into the L2, slower, not merged) ran on an H100, then the full run.
Next (NOTES, session 48): 87 on branch clpad (its entry there; written, not run: the budget ran out), then
the full run on an H200.
Session 50: one H100 after ten refusals ran 90 (kv192: landed), p64turns' timing (turns lose) and a cut 91
(kv256: -4%, one test failed); the calls of branches p64turns / kv192 / kv256 are on branch p64turns (91x
first there). Here: 92, d 64's timeline.
Session 51 (no device): 51, session 50's two checks in one call (kv256's d 256 tests, review50's tests);
it replaces 91x (on p64turns) and 93 (never run). Then 91 once kv256's test is fixed, and 92.
Session 52 (no device): 52 first (92 and 51 on dedup51's libraries, one start), then 91 once kv256 is fixed,
94 (branch ptrim).
Session 53 (one H100): 52, 94, 91, 95 ran: review50, dedup51, ptrim and kv256 landed (95: kv256 rebased, and
bench/mufu_rate.cu: packed ex2 forms give no more results a clock); 96 (branch tma1w) slower, not merged;
97 (main's full build: 81 fp16 prefill cases at every head dim, the split stages' 130 bf16 persistent cases,
memcheck: all passed; its first run skipped the fp16 cases under run's KVATTN_TEST_DTYPES=bf16, now unset).
Next (NOTES, session 53), in order: 98, 99, then 87 (written and their libraries built this session).
Session 54: the checkout came back without .dev/, .peerkit/ and branches gcdbox, fence1, clpad; all three
rewritten from their notes (clpad by a helper). 87, 99, 98 ran on one H100 (after ~12 refused asks): clpad
and fence1 landed, gcdbox landed for d 256's tile only (its d 128 boxes measured level to slower). Next
(NOTES, session 54): 100 (main's full build: the fp8 prefill and fp16 decode cluster kernels of the landed
branches, not yet run on a GPU), then the H200 full run (rebuild build-ci from main first).
Session 55: 101, 102, 100 (and 100's W3 A/B) ran on one H100 after ten refused asks: mmasum landed (d 64
-9% / -6%), mmasum128 slower (not merged), 100 passed, W3 keeps TMA. Next (NOTES, session 55): the H200
full run (build-ci/libkvattn.so.xz rebuilt from d279159, mmasum in it).
Session 56 (H100): the full run, 103-104 (settled W6 timing). Session 57 (H200): the full run, 105 and 106
(lost); 107-112 written. Session 58 (an H100 came for an H200 ask): 107-112 ran (sync57 landed; det57,
start57, ewait2 lost; 108 named one test, mended; 107's H200 question still open); 113 written (sync57 at
d 64 / 256). Next (NOTES, session 58): 113, then 107 on an H200.
102. run(command="bash tools/calls.sh run 102", carry=[".dev/main128.so.xz", ".dev/ms128.so.xz", ".whl"], timeout_s=480)   [tree at main]
   branch mmasum128 (mmasum with the rows' sums on d 128's tile too: the loop's FADD 126 -> 64, HGMMA 16 ->
   24): prefill tests at d 128, racecheck / memcheck, W6 16x128 A B A B. Libraries: tools/dev_libs.sh
   main128:main:128 ms128:mmasum128:128.
101. run(command="bash tools/calls.sh run 101", carry=[".dev/main64.so.xz", ".dev/ms64.so.xz", ".whl"], timeout_s=480)   [tree at main or mmasum]
   branch mmasum: d 64's rows' sums on the tensor cores (SASS: a plain tile 455 -> 402 instructions a consumer
   warp, local loads / stores 5 + 5 -> 3 + 3): prefill tests at d 64 (both files), racecheck / memcheck, W6
   32x64 A B A B. Libraries: tools/dev_libs.sh main64:main:64 ms64:mmasum:64. (Ran, session 55: landed.)
100. run(command="bash tools/calls.sh run 100", carry=["build-ci/libkvattn.so.xz", ".whl"], timeout_s=450)   [tree at main]
   main's full build (xz of a CI build-cuda/libkvattn.so of main): fp8 prefill file and decode cluster tests,
   then W3 d 128 p16 with TMA against KVATTN_SM90_TMA=0 (A B A B; KVATTN_AB100=0 leaves it out).
99. run(command="bash tools/calls.sh run 99", carry=[".dev/main128.so.xz", ".dev/fe128.so.xz", ".dev/main64.so.xz", ".dev/fe64.so.xz", ".whl"], timeout_s=560)   [tree at fence1]
   branch fence1 against main, d 128 then d 64: tests, sanitizers, W6 A B A B. Libraries: tools/dev_libs.sh
   fe64:fence1:64 fe128:fence1:128 main64:main:64 (main128 as built).
98. run(command="bash tools/calls.sh run 98", carry=[".dev/gb256.so.xz", ".dev/gb128.so.xz", ".whl"], timeout_s=480)   [tree at gcdbox]
   branch gcdbox: paged TMA boxes of gcd(page, tile) >= 16 slots (d 256 at pages 32-256, page 48 everywhere):
   its prefill tests at d 256 (16-bit and fp8 caches) and the paged ones at d 128, racecheck / memcheck on
   the new boxes, then bench/page_probe.py (TMA against forced cp.async by page size, d 256 full / causal,
   d 128 page 48). Libraries: tools/dev_libs.sh gb256:gcdbox:256 gb128:gcdbox:128.
87. run(command="bash tools/calls.sh run 87", carry=[".dev/main128.so.xz", ".dev/clpad128.so.xz", ".whl"], timeout_s=480)   [tree at clpad]
   branch clpad (re-created on main: its session-48 checkout was lost): paged leftpads and
   window starts on the cluster form's TMA kernel. test_cluster_paged_leftpad_tma as the smoke test, the
   decode file's cluster / dispatch tests (KVATTN_T87 the step's seconds, 200), racecheck / memcheck on the
   new test's short and S = 3 cases, then A (main128) B (clpad128) over W1 b1 p16+scat+lpad and b1 32k p16
   (the control). Libraries: tools/dev_libs.sh clpad128:clpad:128. Predicted (H100): 32/8 and 64/8 b1 32k
   p16+scat+lpad 61 -> ~54 us, 32/8 b1 128k ~193 -> ~185, p16 level.
97. run(command="bash tools/calls.sh run 97", carry=["build-ci/libkvattn.so.xz", ".whl"], timeout_s=300)   [tree at main]
   main's full build (xz of a CI build-cuda/libkvattn.so): the fp16 prefill cases at every head dim.
95 / 96 (session 53, ran): 95 carried ".probe" (git-ignored since session 53: a probe binary travels only
when carried).
51. run(command="bash tools/calls.sh run 51", carry=[".dev/kv256.so.xz", ".dev/rv64.so.xz", ".dev/rv128.so.xz", ".dev/rv256.so.xz", ".whl"], timeout_s=590)   [tree at review50]
   kv256's d 256 prefill tests (session 50: one failed, unnamed), then branch review50's (the TMA producer's
   edge tiles through one copy loop; fp8's landed and the split V barriers from one past-the-ring offset)
   prefill tests, 16-bit and fp8 caches, at d 128, 256, 64, racecheck / memcheck on the TMA edge tiles; each
   step time-boxed, pytest -v (a failure's name printed as it happens). Less device time left:
   KVATTN_T51="150 90 90 70 30" bash tools/calls.sh run 51 (~480 s). Libraries: tools/dev_libs.sh
   kv256:kv256:256 rv64:review50:64 rv128:review50:128 rv256:review50:256. Branch dedup51 (on review50)
   instead of review50, both checked at once (tree at dedup51): KVATTN_R51=dd, carry .dev/dd{64,128,256}
   (tools/dev_libs.sh dd64:dedup51:64 dd128:dedup51:128 dd256:dedup51:256).
91. run(command="bash tools/calls.sh run 91", carry=[".dev/main256.so.xz", ".dev/kv256.so.xz", ".whl"], timeout_s=560)   [tree at kv256, once fixed]
   kv256 against main at d 256: checks, then W6 8x256 full / causal A B A B (session 50: -4%, H100).
52. run(command="bash tools/calls.sh run 52", carry=[".dev/tl64.so.xz", ".dev/kv256.so.xz", ".dev/dd64.so.xz", ".dev/dd128.so.xz", ".dev/dd256.so.xz", ".whl"], timeout_s=595)   [tree at dedup51]
   92, then 51 on dedup51's libraries with its steps cut to ~450 s: one start for both (~580 s).
94. run(command="bash tools/calls.sh run 94", carry=[".dev/dd64.so.xz", ".dev/pt64.so.xz", ".whl"], timeout_s=560)   [tree at ptrim]
   ptrim against dedup51 at d 64: checks, then W6 32x64 full / causal A B A B (predicted level to -1.5%).
92. run(command="bash tools/calls.sh run 92", carry=[".dev/tl64.so.xz", ".whl"], timeout_s=200)   [tree at main]
   where W6 32x64's tiles go (1.32x FA4's time per clock; session 50: not the turns): bench.prefill_timeline
   at d 64 (stage wait, issue, S wait, softmax, P V wait, tail; the warpgroups' offset and their softmaxes'
   overlap) on a timeline build: tools/dev_libs.sh tl64:main:64:-DKVATTN_PREFILL_TIMELINE=1.
85. run(command="bash tools/calls.sh run 85", carry=[".dev/main128_47.so.xz", ".dev/cbatch128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=600)   [tree at cbatch]
   branch cbatch (the cluster form for a batch past the capacity bound where one sequence alone would
   stream no slower on its clusters: 4/1 b2-b4 x 32k, 8/2 b2, 1 kv head b2 x 128k): the decode tests' cluster
   and dispatch sets with the new test_cluster_long_batch, racecheck / memcheck, A (main) B (cbatch) over
   W1's tp cases and b4 32k, W2, FlashInfer beside B. Libraries: tools/dev_libs.sh main128_47:main:128
   cbatch128:cbatch:128. Predicted (H100): 4/1 b4 32k 40.9 -> ~36.6 (cluster_rate's 4 kv heads b1 32k on
   8 x 3), the rest level (8/2 b4 stays persistent).
84. run(command="bash tools/calls.sh run 84", carry=[".dev/cgpc128.so.xz", ".dev/ptouch128.so.xz", ".whl"], timeout_s=300)   [tree at ptouch]
   branch ptouch (the decode kernels' parameter lines touched by one warp at entry: are the start's
   constant-cache misses serial?): the decode tests' subset, A (main) B (ptouch) over short / b1 / b4 / W2 / W4.
83. run(command="bash tools/calls.sh run 83", carry=[".dev/csplit128.so.xz", ".dev/cgpc128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=600)   [tree at cgpc]
   branch cgpc (the pick: a 16-CTA cluster streams one GPC's ~0.48 TB/s, clusters of 8 first): checks, A
   (main) B (cgpc) over W1's b1 cases, cluster_rate's pick over 1-4 kv heads, FlashInfer beside B.
82. run(command="bash tools/calls.sh run 82", carry=[".dev/csplit128.so.xz", ".dev/cfuse128.so.xz", ".whl"], timeout_s=480)   [tree at cfuse]
   branch cfuse (the S partials merged in the kernel by the last of each slice's ranks, no combine kernel):
   its checks (split units both ways, stray workspace bytes, graphs, bad pages), racecheck / memcheck, A
   (main) B (cfuse) over W1's b1 tp cases, kernel_gaps of both. Supersedes 81 (81's timeline optional).
81. run(command="bash tools/calls.sh run 81", carry=[".dev/csplit128.so.xz", ".dev/csplittl128.so.xz", ".whl"], timeout_s=300)   [tree at main]
   where the split cluster form's ~13-15 us of fixed cost goes (W1 4/1 b1 32k 21.4 us where b1 4k over 8
   kv heads, the same 64 CTAs of 512 keys without a combine, takes 13.9): kernel_gaps (does the combine
   overlap the cluster kernel's end by PDL?) and the cluster form's timeline at 4/1 b1 32k / 128k.
80. run(command="bash tools/calls.sh run 80", carry=[".dev/cwide128.so.xz", ".dev/csplit128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=600)   [tree at csplit]
   csplit's checks (cluster, dispatch, few-unit tests; racecheck / memcheck of split cases), A (main) B
   (csplit) over W1's b1 cases (tp and 32/8), cluster_rate over 1-2 kv heads, FlashInfer beside B.
79. run(command="bash tools/calls.sh run 79", carry=[".dev/cwide128.so.xz", ".whl"], timeout_s=200)   [tree at main]
   the split combine's 4 warps a row (opt-in KVATTN_COMBINE_WIDE_ROWS=1): checks, A (off) B (on) on W1's tp cases.
78. run(command="bash tools/calls.sh run 78", carry=[".dev/cwide128.so.xz", ".dev/cmergetl128.so.xz", ".whl"], timeout_s=300)   [tree at main]
   kernel_gaps and the timeline over 4/1 heads; on an H200 also crule's prediction.
77. run(command="bash tools/calls.sh run 77", carry=[".dev/main128_46.so.xz", ".dev/cmerge128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=500)   [tree at cmerge]
   W1's tensor-parallel cases: main before session 46 against cmerge, FlashInfer beside cmerge.
76. run(command="bash tools/calls.sh run 76", carry=[".dev/crule128.so.xz", ".dev/cmerge128.so.xz", ".whl"], timeout_s=560)   [tree at cmerge]
   the split combine's longer merge: checks, then A = crule, B = cmerge: b1 over 1-8 kv heads, W1 / W2 level.
75. run(command="bash tools/calls.sh run 75", carry=[".dev/crule128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=500)   [tree at crule]
   the rule as a model of both forms' times: checks, cluster_rate with the rule's pick, W1 / W4 b1 + FlashInfer.
73. run(command="bash tools/calls.sh run 73", carry=[".dev/main128_46.so.xz", ".dev/codd128.so.xz", ".whl"], timeout_s=600)   [tree at codd]
   codd's checks (C = 9-15, racecheck at 14, memcheck at 9 / a bad page at 13), then A = main, B = codd with
   KVATTN_DECODE_CLUSTER_ANY_SIZE=1 over W1 short, b1 32k / 128k, W4 b1 (each with its own rules).
74. run(command="bash tools/calls.sh run 74", carry=[".dev/codd128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=420)   [tree at codd]
   bench.cluster_rate (C = 16 / 14 / 8, persistent), then FlashInfer beside codd (switch on) on the same cases.
72. run(command="bash tools/calls.sh run 72", carry=[".dev/codd128.so.xz", ".whl"], timeout_s=500)   [tree at codd]
   branch codd (any cluster size in [8, 16], opt-in KVATTN_DECODE_CLUSTER_ANY_SIZE=1: 8 units take C = 14,
   112 CTAs): checks at C = 9-15 (racecheck / memcheck at 14 / 13), A (off) B (on) over W1 short, b1 32k /
   128k, W4 b1 with KVATTN_DECODE_CLUSTER_LONG=1 on both, then bench.cluster_rate. Run after 71 (or with it,
   on an H200: 71 says what the H200 does today).
71. run(command="bash tools/calls.sh run 71", carry=[".dev/clong4_128.so.xz", ".whl", ".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz"], timeout_s=300)   [tree at main]
   bench.cluster_rate (the cluster form's rate per CTA at 64 / 32 CTAs, the persistent kernel beside it),
   the dispatch and long-sequence checks (clong4's, not yet GPU-run), W1 / W4 b1 with FlashInfer (an H200
   also with KVATTN_DECODE_CLUSTER_LONG=1). .dev/clong4_128 = main's library sources after the merge.
64. run(command="bash tools/calls.sh run 64", carry=[".dev/main128_44.so.xz", ".dev/main128_45.so.xz", ".whl"], timeout_s=300)   [tree at main]
   (run in session 45, NOTES s45) main after ctma: the cluster tests (the dispatch test's TMA cases at
   8,192 / 4,096 slots), racecheck, memcheck, then W1 short A (session 43's main) B (main).
50. run(command="bash tools/calls.sh run 50", carry=[".dev/maintl128.so.xz", ".dev/main128_42.so.xz", ".whl"], timeout_s=400)   [tree at main]
   (run in session 43, NOTES s43) session 42's question: where the cluster form's b1 4k time goes, since it is not the memory
   (bench/ingest.cu, NOTES s42): timelines of main paged / contiguous, cold / warm, and ncu's
   per-instruction stall samples (source page, SASS) of b1 4k / 1k contiguous. Then decide between an
   8-warp cluster CTA (2 warps a scheduler; NOTES s42) and a smaller executed code path.
51. run(command="bash tools/calls.sh run 51", carry=[".dev/main128_42.so.xz", ".dev/cprod128.so.xz", ".dev/cprodtl128.so.xz", ".whl"], timeout_s=500)   [tree at main]
   (run and landed in session 43) branch cprod: the cluster form with a producer warp a ring (consumers never issue a copy; two warps a
   scheduler). SASS (d 128 bf16): the consumer's stage loop 1,455 -> 781 instructions (the copies and
   their address arithmetic out of it), 231 -> 204 registers, no spill; fp8 kernels 248 / 255, no spill.
   Predicted: W1 b1 4k -2 to -3.5 us (21.4-21.8 -> ~18.5-19.5), 2k -1 to -1.5, 1k -0.5 to -1; the
   cluster tests (bad page at C = 8 / 16 / fp8, graph) must pass, racecheck / memcheck clean.
48. run(command="bash tools/calls.sh run 48", carry=[".peerkit/MANIFEST.json", ".peerkit/fi.tar.xz", ".peerkit/fa4.tar.xz.2", "build-ci/libkvattn.so.xz", ".dev/pushtl128.so.xz", ".whl"], timeout_s=600)   [tree at main]
   call 47 on the full library, then the full run's call B (after call A of NOTES' "Running the benchmark
   with the peers"; call C follows at once).
47. run(command="bash tools/calls.sh run 47", carry=[".dev/main64_41.so.xz", ".dev/main128_41.so.xz", ".dev/pushtl128.so.xz", ".whl"], timeout_s=400)   [tree at main]
   FIRST: main after session 41's merges: the MLA default flip's dispatch test (not yet run on a GPU) and
   the kernels' cases at d 64, the cluster bad-page cases at C = 8 and with fp8 caches (added by the
   review), then the push build's timeline at b1 1k / 4k (what is left of the ~11.4 us).
37. run(command="bash tools/calls.sh run 37", carry=[".dev/clu128.so.xz", ".whl"], timeout_s=400)   [tree at cluster]
   the diagnosis of the cluster form's long streams: resident clusters of 16 / 8 (the dispatch print), every
   test's failures by name, C = 0 / 8 / 16 with the capacity bound lifted on b1 1k / 4k / 32k / 128k.
33. run(command="bash tools/calls.sh run 33", carry=[".dev/main128.so.xz", ".dev/sdec128.so.xz", ".whl"], timeout_s=590)   [tree at sdec]
   branch sdec (session 36's helper, committed in session 37: #11's short contexts, b1 1k-4k at 1.45-1.87x
   FlashInfer's time): batch 1 on the sm_90a decode kernel computes the balanced start from the one
   sequence (no block scan, one barrier of three) and, when the CTAs are a multiple of the kv heads (every
   short decode), each CTA finds its one piece in 32-bit arithmetic (unit_cta_range) instead of the line's
   search. The same schedule, so the same bits (its test compares them with the scan's, and the oracle).
   Session 25's timeline of b1 1k: scan 3.03 + walk 1.21 of the 10.4 us before the first full stage.
   Predicted: every b1 decode -2 to -3.5 us (H100 b1 1k-4k 18.1-22.9 us -> 15-20; b1 32k ~-6%, b1 128k
   ~-2%), b4 32k and W2 level. SASS (session 37): the decode kernels' tile loops unchanged; the walk's tiles held
   in 32 bits so that the pieces' loops do not spill (the helper's version spilled 15-18 STL in the bf16
   kernels; now 1 STL / 2 LDL there, and the fp8 kernels go from main's 18-24 STL to 0). The decode tests,
   racecheck / memcheck of the new test, W1's short and b1 cases, b4 32k and W2 Zipf A B A B, then
   bench.kernel_gaps on b1 1k / 4k (the decode kernel and the combine's tail after it) for both.
29. run(command="bash tools/calls.sh run 29", carry=[".dev/main128.so.xz", ".dev/pcp128.so.xz", ".whl"], timeout_s=590)   [tree at pcpasync]
   branch pcpasync (session 36, a helper's count: the 16-bit cp.async producer, which serves page 1 and
   every layout TMA declines, spent ~413 instructions a tile at d 128 against TMA's ~109, with 17-21
   spills: +29% issue on sub-partitions the consumers keep busy; W3 page 1 runs at 0.69x page 16 while
   FA4 has no page-1 penalty): the row walked a tile at a time in 32-bit (no division a tile), fixed-lane
   shuffles, destinations made once, zero-fill from one ballot: ~213 a tile, no spill. The d 128 prefill
   tests, racecheck, memcheck; W3 p1 cases and W6 A B A B. Predicted W3 b8 +512 over 32k p1 5,713 ->
   4,600-5,000 us (0.79-0.85x page 16), b1 +2048 over 32k p1 2,837 -> 2,250-2,450.
30. run(command="bash tools/calls.sh run 30", carry=[".dev/main128.so.xz", ".dev/pcp128.so.xz", ".whl"], timeout_s=590)   [tree at pcpasync]
   the same with KVATTN_SM90_TMA=0 (the new producer on every layout: its tests are the correctness check
   that matters), W6 16x128 A B A B: predicted 4,654 -> 4,050-4,250 us (1.08-1.13x the TMA time).
31. run(command="bash tools/calls.sh run 31", carry=[".dev/main128.so.xz", ".dev/w3tl128.so.xz", ".whl"], timeout_s=400)   [tree at w3short]
   W3 over short prefixes (b1 +512 over 4k: 1.35x FA4's time at the same clock, of which ~7 us is the
   append and q's rotation that FA4's timed call does not do): bench.kernel_gaps (append / prefill
   split) and the timeline build of branch w3short (a CTA's start, the PDL wait, the first full stage, every
   CTA's span in global time). A helper's estimate (b1): append ~7 us, CTA start to first full stage 4-5,
   36 tiles ~59-63, epilogue ~2.5, launch / drain 1-2: ~76-80 of the 86.6 measured.
32. run(command="bash tools/calls.sh run 32", carry=[".dev/main128.so.xz", ".whl"], timeout_s=590)
   the same two cases under the existing switches (no loads and no softmax / no loads / cp.async / q
   rotated ahead / persistent), one round each: which part of the fixed cost each removes.
5. run(command="bash tools/calls.sh run 5", carry=[".dev/main128.so.xz", ".whl"], timeout_s=590)
   W3's fp8kv cases and their bf16 twins: the landed fp8 path against the portable kernel
   (KVATTN_FORCE_PORTABLE=1 for A), same library.
12. run(command="bash tools/calls.sh run 12", carry=[".dev/main128.so.xz", ".dev/e4m3dead128.so.xz", ".whl"], timeout_s=400)
   branch e4m3dead (the e4m3 kernel without its unreachable paths; rebased onto main with pvmid in session
   35): the fp8 tests at d 128, racecheck and memcheck on e4m3 cases, then bench/fp8_prefill.py on main
   and on it (level expected). If green, land it.
END
}

# bench/fp8_prefill.py's W6 16k full rows, once a library: fp8_rows TIMEOUT NAME:LIB ... (into $OUT/fp8_NAME.*)
fp8_rows() {
  local limit=$1 lib
  shift
  source tools/device_env.sh
  for lib in "$@"; do
    KVATTN_LIBRARY=$(device_lib "${lib#*:}" "${lib%%:*}") timeout -k 5 "$limit" python3 -m bench.fp8_prefill \
      --filter "16k full" --json "$OUT/fp8_${lib%%:*}.json" 2>&1 | tee "$OUT/fp8_${lib%%:*}.txt"
  done
}

# The cluster form's checks of library B (the decode tests of the cluster form, dispatch, device errors and
# graphs; racecheck and memcheck of its one-sequence, bad-page and fp8 cases) and W1 short A B A B, into
# $OUT/NAME and $OUT/ab_NAME.txt, with a summary on stdout: cluster_ab NAME A B
cluster_ab() {
  OUT=$OUT/$1 KVATTN_AB_A=$2 KVATTN_AB_B=$3 KVATTN_AB_DIMS=128 \
    KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
    KVATTN_AB_K="cluster or dispatch or device_error or graph" KVATTN_AB_SMOKE_K="cluster_one_sequence" \
    KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=90 \
    KVATTN_AB_RACE_K="cluster_one_sequence or cluster_bad_page" KVATTN_AB_MEM_K="cluster_bad_page or cluster_fp8_cache" \
    KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh > "$OUT/ab_$1.txt" 2>&1
  echo "== $1"; grep -E "^\[" "$OUT/ab_$1.txt"; grep -E "^(FAILED|ERROR)" "$OUT/$1/tests.log" | cut -c1-300 | head
  grep -E "^W1|^worst" "$OUT/ab_$1.txt"
  grep -m1 -A3 "Race reported" "$OUT/$1/racecheck.log" | cut -c1-200
}

# W1 short in two rounds of three variants (a: library A; b and c: library B with the variables ENV_B /
# ENV_C) and tools/gpu_ab.py's table: w1_short_abc A B "ENV_B" "ENV_C"
w1_short_abc() {
  source tools/device_env.sh
  local a b round v lib env_v dirs=()
  a=$(device_lib "$1" abc_a); b=$(device_lib "$2" abc_b)
  for round in 1 2; do
    for v in a b c; do
      lib=$a env_v=()
      [ $v = b ] && { lib=$b; read -r -a env_v <<< "$3"; }
      [ $v = c ] && { lib=$b; read -r -a env_v <<< "$4"; }
      env "${env_v[@]}" KVATTN_LIBRARY=$lib timeout -k 5 120 python3 -m bench.run --suite W1 --filter short \
        --max-minutes 1.5 --out "$OUT/${v}_$round" > "$OUT/${v}_$round.log" 2>&1
      echo "$v round $round rc=$?"; dirs+=("$OUT/${v}_$round")
    done
  done
  python3 tools/gpu_ab.py "${dirs[@]}" 2>&1 | tail -9
}

# W6 full and causal at one head dim, A B A B after B's checks (tools/prefill_ab.sh): w6_ab OUT A B DIM SHAPE
# SMOKE_S TEST_S SAN_S [RACE_K] (SHAPE as the cases name it, e.g. 16x128).
# d128_ab OUT A B TEST_SECONDS: a d 128 prefill A/B (smoke, tests, sanitizers; W6 16x128 and W3 b8 +512 over
# 32k at pages 16 and 1, A B A B), its table lines.
d128_ab() {
  OUT="$1" KVATTN_AB_A="$2" KVATTN_AB_B="$3" KVATTN_AB_DIMS=128 \
    KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W6,W3 KVATTN_AB_SMOKE_TIMEOUT=60 \
    KVATTN_AB_TEST_TIMEOUT="$4" KVATTN_AB_SAN_TIMEOUT=40 \
    KVATTN_AB_FILTER="=W6 prefill 16k 16x128 full|=W6 prefill 16k 16x128 causal|=W3 32/8 b8 +512 over 32k p16|=W3 32/8 b8 +512 over 32k p1" \
    bash tools/prefill_ab.sh | grep -E "^\[|^W[0-9]|^worst|^SM clock" | cut -c1-220
}
w6_ab() {
  local race=()
  [ -n "${9:-}" ] && race=(KVATTN_AB_RACE_K="$9")
  env "${race[@]}" OUT="$1" KVATTN_AB_A="$2" KVATTN_AB_B="$3" KVATTN_AB_DIMS="$4" KVATTN_AB_ROUNDS=2 \
    KVATTN_AB_SUITES=W6 KVATTN_AB_FILTER="=W6 prefill 16k $5 full|=W6 prefill 16k $5 causal" \
    KVATTN_AB_SMOKE_TIMEOUT="$6" KVATTN_AB_TEST_TIMEOUT="$7" KVATTN_AB_SAN_TIMEOUT="$8" bash tools/prefill_ab.sh
}

# A pytest step against library LIB in worker processes, time-boxed (tools/device_env.sh sourced first; more
# variables, e.g. KVATTN_TEST_HEAD_DIMS, from the caller's environment): its log /tmp/NAME.log, its last line
# and the failed tests on stdout. test_step NAME LIB SECONDS PYTEST_ARGS...
test_step() {
  local name=$1 lib=$2 secs=$3
  shift 3
  env "${TEST_WORKER_ENV[@]}" KVATTN_LIBRARY="$lib" timeout -k 5 "$secs" python3 -m pytest -q -p no:cacheprovider \
    $(test_workers) "$@" > "/tmp/$name.log" 2>&1
  echo "$name rc=$? $(tail -1 "/tmp/$name.log")"
  grep -E "^(FAILED|ERROR)" "/tmp/$name.log" | cut -c1-300 | head -8
}

# A prefill_ab.sh run's summary (its rounds, the cases' table, the tests' failures) on stdout and the failed
# tests' error lines into $OUT/test_errors.txt: ab_report DIR FILE (DIR its OUT, FILE its output in $OUT).
ab_report() {
  grep -E "^\[|^W[0-9]|^worst|^SM clock" "$OUT/$2" | cut -c1-220
  grep -E "^(FAILED|ERROR)" "$1/tests.log" | cut -c1-300 | head
  grep -B2 -A14 "^E " "$1/tests.log" | head -80 > "$OUT/test_errors.txt"
}

# FlashInfer beside library LIB on the bench cases of FILTER (suites SUITES, e.g. W1,W4), the kit's fa2 / fa3
# groups carried (.peerkit/MANIFEST.json, fi.tar.xz): results.md / .jsonl into $OUT, their rows on stdout:
# peers_beside TAG LIB SUITES FILTER
peers_beside() {
  local dir=/tmp/peers$1 name=bench_${3//,/_}
  OUT=$dir KVATTN_LIBRARY=$2 KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$4" \
    KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=2 KVATTN_BENCH_TIMEOUT=150 \
    bash tools/gpu_bench.sh "$3" > "$OUT/peers.txt" 2>&1
  echo "== peers rc=$?"; tar -xzf "$dir/$name.tgz" -C "$dir" 2> /dev/null
  find "$dir" -name results.md -exec cp {} "$OUT/" \; ; find "$dir" -name results.jsonl -exec cp {} "$OUT/" \;
  grep -E "^\| W[0-9]" "$OUT/results.md" | cut -c1-260
}

case "${1:-show}" in
  libs) echo "$LIBS" ;;
  show) show ;;
  run)
    export OUT=${OUT:-/tmp/kvattn_calls} KVATTN_TEST_DTYPES=bf16
    case "${2:?call number}" in
      5)
        export KVATTN_FORCE_PORTABLE=1  # A: the portable kernel; B overrides it
        KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/main128.so.xz \
          KVATTN_AB_ENV_B="KVATTN_FORCE_PORTABLE=0" KVATTN_AB_SUITES=W3 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_FILTER="fp8kv|=W3 32/8 b8 +512 over 4k p16|=W3 32/8 b8 +2048 over 32k p16|=W3 32/8 b1 +2048 over 32k p16" \
          bash tools/prefill_ab.sh
        ;;
      91)  # session 50: branch kv256 (d 256: 80-key tiles in two stages, K and V on barriers of their own).
        OUT=/tmp/ab91 KVATTN_AB_A=.dev/main256.so.xz KVATTN_AB_B=.dev/kv256.so.xz KVATTN_AB_DIMS=256 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W6 \
          KVATTN_AB_FILTER="=W6 prefill 16k 8x256 full|=W6 prefill 16k 8x256 causal" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=180 KVATTN_AB_SAN_TIMEOUT=50 \
          bash tools/prefill_ab.sh
        ;;
      51)  # session 51: kv256's and review50's checks in one call (a start is what the device lacks), time-boxed; -v so
        # that a failure's name is in the log as it happens, even where the step's time runs out.
        source tools/device_env.sh
        mkdir -p /tmp/ab51
        step() {  # name, library, head dim, seconds, test files...
          local name=$1 lib=$2 d=$3 secs=$4
          shift 4
          [ "$secs" -gt 0 ] || { echo "$name skipped (0 s)"; return; }  # (timeout 0 would not limit it)
          env "${TEST_WORKER_ENV[@]}" KVATTN_TEST_HEAD_DIMS=$d KVATTN_LIBRARY=$lib timeout -k 5 "$secs" \
            python3 -m pytest -v -p no:cacheprovider $(test_workers) "$@" > /tmp/ab51/$name.log 2>&1
          echo "$name rc=$? passed $(grep -c ' PASSED' /tmp/ab51/$name.log) failed $(grep -c ' FAILED' /tmp/ab51/$name.log) $(tail -1 /tmp/ab51/$name.log | cut -c1-120)"
          grep -E " FAILED|^E  " /tmp/ab51/$name.log | cut -c1-300 | head -12
        }
        read -r t_kv t128 t256 t64 t_san <<< "${KVATTN_T51:-170 100 100 100 40}"  # each step's seconds
        R=${KVATTN_R51:-rv}  # the checked libraries .dev/$R{128,256,64}: rv (review50) or dd (dedup51, on it)
        step kv256 "$(device_lib .dev/kv256.so.xz kv256)" 256 "$t_kv" tests/python/test_cuda_prefill_sm90.py
        for dt in 128:$t128 256:$t256 64:$t64; do
          d=${dt%%:*}
          step $R$d "$(device_lib .dev/$R$d.so.xz $R$d)" $d "${dt#*:}" tests/python/test_cuda_prefill_sm90.py \
            tests/python/test_cuda_prefill_sm90_fp8.py
        done
        if [ "$t_san" -gt 0 ]; then  # (0 s: no sanitizers, and their library need not be carried)
          L=$(device_lib .dev/${R}128.so.xz ${R}128)
          for tool in racecheck memcheck; do
            KVATTN_TEST_HEAD_DIMS=128 KVATTN_LIBRARY=$L timeout -k 5 "$t_san" compute-sanitizer --tool $tool \
              --report-api-errors no python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_prefill_sm90.py \
              -k "persistent_contiguous_tma and leftpad" > /tmp/ab51/$tool.log 2>&1
            echo "$tool rc=$? $(grep -E 'SUMMARY' /tmp/ab51/$tool.log | tail -1) $(tail -1 /tmp/ab51/$tool.log)"
          done
        fi
        ;;
      117)  # session 58 (written, not run; a helper's branch at 1dd3002, built: no C75xx, spills 456 / 672 -> 176 / 292 B): branch seesaw, the 64-row MLA
        # kernel's seesaw schedule (bench/plans/mla_seesaw.md: both consumers compute S for alternate tiles, the
        # running max through shared vectors and thread-counted mbarriers, the stages in halves). Predicted W5
        # 128 heads 325-386 -> 555-630 TFLOP/s (1.45-1.63x; 485-525 if the stage copy stays exposed); the 16-head
        # cases (rows kernel) level. A = sy64 (main at 8b4c92f), B = ss64 (tools/dev_libs.sh ss64:seesaw:64).
        # Carry .dev/sy64.so.xz, .dev/ss64.so.xz, .whl. ~300 s. Pass: tests, racecheck 0 hazards, memcheck 0.
        OUT=/tmp/ab117 KVATTN_AB_A=.dev/sy64.so.xz KVATTN_AB_B=.dev/ss64.so.xz KVATTN_AB_DIMS=64 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py KVATTN_AB_K="" \
          KVATTN_AB_SMOKE_K="runs_on_hopper or (test_mla_sm90 and not rows and (paged or contiguous))" KVATTN_AB_RACE_K="test_mla_sm90 and hnd and not rows" \
          KVATTN_AB_MEM_K="test_mla_sm90 and not rows and (empty or 40)" KVATTN_AB_SMOKE_TIMEOUT=90 \
          KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=120 KVATTN_AB_SUITES=W5 \
          KVATTN_AB_FILTER="W5 MLA 128|=W5 MLA 16/1 b64 4k p64" bash tools/prefill_ab.sh > "$OUT/ab117.txt" 2>&1
        ab_report /tmp/ab117 ab117.txt
        ;;
      116)  # session 58 (written, not run): branch mlarel (the MLA rows kernel frees tile t's stage before waiting
        # for tile t + 1's: two 72-KiB copies in flight a CTA instead of one; the d 512 kernel's ring unchanged) against
        # main at d 64: the MLA tests (both kernels), racecheck / memcheck on rows cases, W5 A B A B. A = sy64
        # (main's sources at 8b4c92f), B = mlr64 (tools/dev_libs.sh mlr64:mlarel:64). Predicted: the 16-head cases
        # streaming at 4k -5 to -13% (b128 4k 195 -> ~170-185 us), 32k level to -8% (HBM-bound near 4.1 TB/s),
        # the 128-head cases level (64-row kernel, untouched). Carry .dev/sy64.so.xz, .dev/mlr64.so.xz, .whl.
        # ~250 s. Best after 115 in the same session (115 says where the 4k cases' intercept is).
        OUT=/tmp/ab116 KVATTN_AB_A=.dev/sy64.so.xz KVATTN_AB_B=.dev/mlr64.so.xz KVATTN_AB_DIMS=64 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py KVATTN_AB_K="" \
          KVATTN_AB_SMOKE_K="test_mla_sm90_rows and (paged or contiguous)" KVATTN_AB_RACE_K="test_mla_sm90_rows and lengths" \
          KVATTN_AB_MEM_K="splits_nan_page" KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 \
          KVATTN_AB_SAN_TIMEOUT=90 KVATTN_AB_SUITES=W5 \
          KVATTN_AB_FILTER="=W5 MLA 16/1 b64 4k p64|=W5 MLA 16/1 b128 4k p64|=W5 MLA 16/1 b64 32k p64|=W5 MLA 16/1 b128 32k p64|=W5 MLA 128/1 b64 4k p64" \
          bash tools/prefill_ab.sh > "$OUT/ab116.txt" 2>&1
        ab_report /tmp/ab116 ab116.txt
        ;;
      115)  # session 58 (written, not run): where MLA's 16-head decode loses its time. The H200 run (session 57):
        # W5 16/1 b64 4k p64 132.8 us (2.29 TB/s: 128 CTAs, 2 static splits of 2,048 keys), b128 4k 195.2 (3.12:
        # 128 CTAs of 4,096 keys), b64 32k 650.7 (3.72), b128 32k 1,231 (3.93). A line through the two 4k cases
        # (time = fixed + a CTA's bytes / its rate) gives ~38 GB/s a CTA and ~70 us of fixed cost, far over the
        # ~10-20 us of start and combine other kernels pay: kernel_gaps says whether it is the MLA kernel, the
        # split combine or a gap; then the three kernels on the same cases (the rows kernel, the 64-row one by
        # KVATTN_SM90_MLA_ROWS=0, the portable one by KVATTN_SM90_MLA=0). Main's full build (build-ci). Carry
        # build-ci/libkvattn.so.xz, .whl. ~200 s.
        source tools/device_env.sh; lib=$(device_lib build-ci/libkvattn.so.xz full115)
        KVATTN_LIBRARY=$lib timeout -k 5 120 python3 -m bench.kernel_gaps "W5 MLA 16/1 b64 4k p64" \
          "W5 MLA 16/1 b128 4k p64" "W5 MLA 16/1 b64 32k p64" "W5 MLA 128/1 b64 4k p64" 2>&1 | tail -40
        # the sweep (kernel_gaps takes W5 MLA names at any length): a line through the kernel's durations
        # says whether the 4k cases' intercept is a constant of the call or a ramp
        KVATTN_LIBRARY=$lib timeout -k 5 150 python3 -m bench.kernel_gaps "W5 MLA 16/1 b128 1k p64" \
          "W5 MLA 16/1 b128 2k p64" "W5 MLA 16/1 b128 8k p64" "W5 MLA 16/1 b128 16k p64" 2>&1 | tail -30
        for v in rows kernel64 portable; do
          env_v=(); [ $v = kernel64 ] && env_v=(KVATTN_SM90_MLA_ROWS=0); [ $v = portable ] && env_v=(KVATTN_SM90_MLA=0)
          env "${env_v[@]}" KVATTN_LIBRARY=$lib timeout -k 5 120 python3 -m bench.run --suite W5 --filter "W5 MLA 16/1" \
            --no-peers --flex none --max-minutes 1.5 --out "$OUT/w5_$v" > "$OUT/w5_$v.log" 2>&1
          echo "== $v rc=$?"; grep -E "^\| W5" "$OUT/w5_$v/results.md" | cut -d'|' -f2,4,5 | head -8
        done
        ;;
      114)  # session 58 (written, not run): bench/gpc_probe.cu (build here: nvcc -O3 -std=c++17
        # -gencode=arch=compute_90a,code=sm_90a bench/gpc_probe.cu -o .probe/gpc_probe; carry .probe/gpc_probe,
        # ~1 MB): the GPCs from cluster placements, then one CTA an SM streaming equal slices, per GPC: end
        # times and GB/s an SM. The question: is the persistent decode kernel's end spread (H200 b1 128k: last
        # stages 121-135 us, median 128) the GPCs' unequal sizes? Yes if a larger GPC's SMs stream slower and
        # end later in step with their count; then the balanced line would weigh a CTA by its GPC. ~15 s; run
        # it in any call (both cards answer for themselves).
        timeout 60 .probe/gpc_probe "${KVATTN_GPC_MIB:-32}" 5
        ;;
      113)  # session 58 (written, not run: the device time ended): sync57 (landed at d 128 on call 111's median
        # -0.8%) at d 64 and d 256, which share the changed tile loop: prefill tests, racecheck / memcheck, W6 A B A
        # B at each. A = main64 (61f0ead) / main256 (9c0f715): main's sources before sync57; B = sy64 / sy256
        # (main with it). Carry .dev/main64.so.xz, .dev/sy64.so.xz, .dev/main256.so.xz, .dev/sy256.so.xz, .whl
        # (~63 MB with the checkout). ~350-450 s. If one loses, keep lane 0 at that head dim.
        w6_ab /tmp/ab113a .dev/main64.so.xz .dev/sy64.so.xz 64 32x64 60 "${KVATTN_T113:-100}" 40
        w6_ab /tmp/ab113b .dev/main256.so.xz .dev/sy256.so.xz 256 8x256 60 "${KVATTN_T113:-100}" 40
        ;;
      109)  # session 57 (ran in session 58, H100: default cases +2-3.5%, deterministic Zipf +5.5%; not merged): branch det57 (a helper's; /work/notes/s57/deterministic.md): deterministic
        # decode's chunks on two lines (sequences of >= 28 tiles, then the rest, whose cuts absorb the first line's
        # snap error), bits unchanged (a chunk's bits do not depend on which CTA computes it). Predicted W2 b128 Zipf
        # p16 deterministic 320.5 -> ~298 us (1.10x -> ~1.02-1.03x the default), W1 deterministic level. Its walk
        # spills in the default kernels (bf16 8 producers 0 -> 120 B): B's default cases say whether that costs.
        # A = main128, B = det128; then det128 against itself with KVATTN_DECODE_SM90_DET_SMALL=0 (one line).
        # Carry .dev/main128.so.xz, .dev/det128.so.xz, .whl. ~300 s.
        F="=W2 32/8 b128 zipf p16 deterministic|=W1 32/8 b4 32k p16 deterministic|=W1 32/8 b4 32k p16|=W2 32/8 b128 zipf p16|=W2 32/8 b128 uniform p16|=W1 32/8 b16 128k p16"
        OUT=/tmp/ab109 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/det128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="deterministic or dispatch or few_units" KVATTN_AB_SMOKE_K="deterministic_chunks_batch_invariant" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="deterministic_chunks_batch_invariant" KVATTN_AB_MEM_K="deterministic_chunks_batch_invariant" \
          KVATTN_AB_SUITES=W1,W2 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab109 ab.txt
        source tools/device_env.sh; L=$(device_lib .dev/det128.so.xz det109)
        for n in 0 1 100000; do  # one line; every sequence on the first; every one on the second
          KVATTN_DECODE_SM90_DET_SMALL=$n KVATTN_TEST_HEAD_DIMS=128 KVATTN_LIBRARY=$L timeout 90 python3 -m pytest -q \
            -p no:cacheprovider tests/python/test_cuda_decode_sm90.py -k deterministic 2>&1 | tail -1 | sed "s/^/DET_SMALL=$n: /"
        done
        OUT=/tmp/ab109b KVATTN_AB_A=.dev/det128.so.xz KVATTN_AB_B=.dev/det128.so.xz KVATTN_AB_ENV_A="KVATTN_DECODE_SM90_DET_SMALL=0" \
          KVATTN_AB_CHECK=0 KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W1,W2 \
          KVATTN_AB_FILTER="=W2 32/8 b128 zipf p16 deterministic|=W1 32/8 b4 32k p16 deterministic|=W1 32/8 b16 128k p16 deterministic" \
          bash tools/prefill_ab.sh 2>&1 | grep -E "^W[0-9]|^worst" | cut -c1-220
        ;;
      111)  # session 57 (ran in session 58, H100, with 3 more rounds: median -0.8%; landed): branch sync57 (a helper's, /work/notes/s57/d128_sync.md: kvattn's d 128
        # consumer runs fewer synchronization instructions a tile than FA4's, so no barrier goes; the per-tile
        # stage release by elect.sync instead of lane 0 by threadIdx.x takes an S2R, a LOP3 and a VOTEU off the
        # tile, the S2R two instructions before P V's wait) against main at d 128: smoke, tests, sanitizers,
        # W6 16x128 and two W3 cases A B A B. Predicted level to -1%. Carry .dev/main128.so.xz, .dev/sy128.so.xz,
        # .whl (with 112: .dev/ew2x128.so.xz too). ~250 s.
        d128_ab /tmp/ab111 .dev/main128.so.xz .dev/sy128.so.xz "${KVATTN_T111:-130}"
        ;;
      112)  # session 57 (ran in session 58, H100: +0-5%; not merged): branch ewait2 (the helper's patch on ewait's protocol: the stage probe's
        # warp vote moved from right after the test, mid-softmax, where ewait put the test's latency on the path,
        # to the next tile's head; ptxas keeps the probe as a predicate over the softmax). Library ew2x128 was
        # built by the helper from main + the same patch (d 128 bf16 only). Predicted -2 to -6% if the head wait
        # is the mbarrier round trip, +1 to +3% if the probe itself costs the tile (as ewait's +2-4% says).
        # Carry .dev/main128.so.xz, .dev/ew2x128.so.xz, .whl. ~250 s.
        d128_ab /tmp/ab112 .dev/main128.so.xz .dev/ew2x128.so.xz "${KVATTN_T112:-130}"
        ;;
      110)  # session 57 (ran in session 58, H100: level to +1.5%; not merged): branch start57 (a helper's; /work/notes/s57/decode_start.md): the
        # persistent decode kernel's consumers prefetch the CTA's first K / V rows into the L2 right after the PDL
        # wait (DRAM traffic from ~5.5 us instead of ~7.75). Predicted W1 b4 32k p16 / b1 128k p16 -1.0 to -1.8%,
        # W2 b128 uniform -0.3 to -0.7%, b16 128k level. A = main128, B = st128. Carry .dev/main128.so.xz,
        # .dev/st128.so.xz, .whl. ~250 s.
        F="=W1 32/8 b4 32k p16|=W1 32/8 b1 128k p16|=W1 32/8 b16 128k p16|=W1 32/8 b1 32k p16|=W2 32/8 b128 uniform p16|=W2 32/8 b128 zipf p16|=W4 32/8 b8 4k q4 p16|=W1 32/8 b4 32k p16 fp8kv"
        OUT=/tmp/ab110 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/st128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="features or few_units or dispatch or deterministic" KVATTN_AB_SMOKE_K="test_features and features0 and False" \
          KVATTN_AB_RACE_K="test_features and features0 and False" KVATTN_AB_MEM_K="few_units_many_pieces" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_SUITES=W1,W2,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab110 ab.txt
        ;;
      108)  # session 57 (ran in session 58, H100: 1 failed, 6,093 passed in 349 s; the failure mended): the whole Python suite on the GPU machine with the full build. Session
        # 57 ran `pytest -n 8 tests/python` there once (the usual check is -k cuda): one F at ~94%, unnamed, the
        # run cut at 250 s. Its likely cause, test_distributed's cp_scaling smoke expecting the CPU's token
        # counts, is mended; this names whatever else fails (-v lines carry the ids; SIGINT keeps the summary).
        # Carry build-ci/libkvattn.so.xz and .whl. ~300-500 s: a run() of its own (107 beside it would pass 600 s).
        source tools/device_env.sh; lib=$(device_lib build-ci/libkvattn.so.xz full108)
        # (every dtype: `run` exports KVATTN_TEST_DTYPES=bf16 for the A/B calls; session 57's run took ~260 s to 97%)
        env -u KVATTN_TEST_DTYPES "${TEST_WORKER_ENV[@]}" KVATTN_LIBRARY=$lib timeout -s INT -k 15 "${KVATTN_T108:-480}" python3 -m pytest \
          tests/python -v -rfE --durations=15 -p no:cacheprovider $(test_workers) > "$OUT/pytest108.log" 2>&1
        echo "== whole suite rc=$?"
        grep -E " FAILED| ERROR|^FAILED|^ERROR|slowest|[0-9.]+s (call|setup)|[0-9]+ (passed|failed)" "$OUT/pytest108.log" | cut -c1-250 | tail -45
        ;;
      107)  # session 57 (ran in session 58 on an H100, which answers nothing for the H200: run it on an H200): does the H200 want the cluster form for batch 1 past the capacity bound?
        # The session-57 run (H200): W1 b1 32k 0.98-1.06x FlashInfer (the cluster form), b1 128k 1.08-1.12x and
        # W4 b1 32k q1 1.06x (the persistent kernel: the bandwidth rule of cluster_shape.hpp keeps it there on
        # the H200). Main's full build (build-ci), default against KVATTN_DECODE_CLUSTER_LONG=1, FlashInfer in
        # the same call; bench.cluster_rate's per-CTA rate first (raise kClusterCtaBytesPerUs if 64 CTAs stream
        # >= 85% of the card's bandwidth). ~150 s. Carry build-ci/libkvattn.so.xz, .peerkit/MANIFEST.json,
        # .peerkit/fi.tar.xz, .whl (the kit unpacks FlashInfer alone in seconds).
        source tools/device_env.sh; lib=$(device_lib build-ci/libkvattn.so.xz cr107)
        KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.cluster_rate > "$OUT/cluster_rate.txt" 2>&1
        echo "== cluster_rate rc=$?"; cut -c1-200 "$OUT/cluster_rate.txt"
        F="=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W1 32/8 b1 128k p64|=W1 64/8 b1 128k p16|=W1 32/8 b1 32k p16|=W4 32/8 b1 32k q1 p16|=W4 32/8 b1 32k q4 p16"
        for m in default long; do
          env_m=(); [ $m = long ] && env_m=(KVATTN_DECODE_CLUSTER_LONG=1)
          env "${env_m[@]}" OUT=/tmp/peers107_$m KVATTN_LIBRARY=build-ci/libkvattn.so.xz KVATTN_TORCH_OP=0 \
            KVATTN_BENCH_FILTER="$F" KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=2 \
            KVATTN_BENCH_TIMEOUT=150 bash tools/gpu_bench.sh W1,W4 > "$OUT/peers_$m.txt" 2>&1
          echo "== peers $m rc=$?"; cp /tmp/peers107_$m/bench_W1_W4.tgz "$OUT/peers_$m.tgz"
          grep -E "^W[14]:" "$OUT/peers_$m.txt"
        done
        ;;
      105)  # session 56 (run in session 57, H200: d 128 +2-4.5%, d 64 +1-1.7%, not merged): branch ewait (the next tile's stage tested with mbarrier.test_wait during
        # this tile's softmax; the wait at the next tile's head skipped when the whole warp saw it full: session 9
        # measured ~300 clocks of stage wait with the stage long loaded, and split128 / k128s +4% for one more
        # wait a tile) against main, d 128 (W6 16x128, two W3 cases), then d 64 (W6 32x64): tests, sanitizers.
        d128_ab /tmp/ab105a .dev/main128.so.xz .dev/ew128.so.xz "${KVATTN_T105:-130}"
        w6_ab /tmp/ab105b .dev/main64.so.xz .dev/ew64.so.xz 64 32x64 60 "${KVATTN_T105:-130}" 40
        ;;
      106)  # session 56 (run in session 57, H200: +1-4%, not merged): branch d64order (helper's SASS reading, /work/notes/s56/d64_sass.md on the
        # machine of session 56: d 64's P V wait after 2 of 16 exponential pairs, FA4's place, and O's rescale after
        # P's packing, so the packs run between the MUFU instead of after them) against main at d 64: the d 64
        # prefill tests of both files, sanitizers, W6 32x64 A B A B. Predicted -2 to -5% full, -1.5 to -4% causal.
        KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          w6_ab /tmp/ab106 .dev/main64.so.xz .dev/do64.so.xz 64 32x64 60 "${KVATTN_T106:-150}" 40
        ;;
      104)  # session 56: W6 timed at a settled power state. The suites heat each library 0.3 s before its samples;
        # NVML's power reading and the power cap's clock follow a ~1-s average, so a library timed after an
        # idle pause (FA4 after its kernel's compile) may run its samples at a higher clock than one timed
        # right after load (kvattn after the previous case's peers). Here every library replays 3 s first.
        # Needs the kit unpacked (calls A1, A2 first, on the same machine); the main build (build-ci). (Run twice in
        # session 56; the bench then made settling its default for W6 / W3 / W5: KVATTN_BENCH_SETTLE_MAX_S=0 keeps
        # this call the fixed 3 s it measured.)
        OUT=${OUT:-/tmp/b104} KVATTN_BENCH_HEAT_S=3 KVATTN_BENCH_SETTLE_MAX_S=0 KVATTN_LIBRARY=build-ci/libkvattn.so.xz KVATTN_TORCH_OP=0 \
          KVATTN_BENCH_FILTER="W6 prefill 16k 16x128|W6 prefill 16k 32x64|W6 prefill 16k 16x192|W6 prefill 16k 8x256" \
          KVATTN_BENCH_ARGS="--peers flashinfer,fa4,cudnn --flex none" KVATTN_BENCH_MINUTES=4 \
          KVATTN_BENCH_TIMEOUT=300 bash tools/gpu_bench.sh W6
        ;;
      103)  # session 56: branch split128 (d 128 on split K / V stages, three of each: a consumer frees K_t after its
        # Q K^T and waits for V_t only a tile later, where joint stages wait for K_t and V_t together) against
        # main at d 128: tests, sanitizers, W6 16x128 and four W3 cases (TMA at p16, the cp.async producer at p1)
        # A B A B.
        OUT=/tmp/ab103 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/sp128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W6,W3 KVATTN_AB_SMOKE_TIMEOUT=60 \
          KVATTN_AB_TEST_TIMEOUT="${KVATTN_T103:-150}" KVATTN_AB_SAN_TIMEOUT=40 \
          KVATTN_AB_FILTER="=W6 prefill 16k 16x128 full|=W6 prefill 16k 16x128 causal|=W3 32/8 b8 +512 over 4k p16|=W3 32/8 b8 +512 over 32k p16|=W3 32/8 b1 +2048 over 32k p16|=W3 32/8 b8 +512 over 32k p1" \
          bash tools/prefill_ab.sh | grep -E "^\[|^W[0-9]|^worst|^SM clock" | cut -c1-220
        ;;
      102)  # session 55: branch mmasum128 (mmasum with d 128's tile too) against main at d 128: tests, sanitizers,
        # W6 16x128 A B A B.
        w6_ab /tmp/ab102 .dev/main128.so.xz .dev/ms128.so.xz 128 16x128 60 "${KVATTN_T102:-150}" 40
        ;;
      101)  # session 55: branch mmasum (d 64's rows' sums on the tensor cores: P times a block of ones beside P V's
        # k-steps), its prefill tests at d 64 (16-bit and fp8 caches: both kernels changed), sanitizers, W6 32x64
        # A B A B against main.
        KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          w6_ab /tmp/ab101 .dev/main64.so.xz .dev/ms64.so.xz 64 32x64 60 "${KVATTN_T101:-150}" 40
        ;;
      100)  # session 54 (not run: no device time left): main's full build after fence1, gcdbox and clpad landed
        # (build-ci/libkvattn.so.xz from CI's build-cuda). The A/B libraries were bf16 and their calls ran the
        # 16-bit prefill file: the fp8-cache prefill kernels (fence1's ring_slot in their producers) and the
        # decode cluster form's fp16 kernels (clpad) never ran. Both files, every head dim and dtype.
        source tools/device_env.sh
        unset KVATTN_TEST_DTYPES  # (a full build has both dtypes)
        L=$(device_lib build-ci/libkvattn.so.xz full)
        test_step t100_fp8_prefill "$L" "${KVATTN_T100:-150}" tests/python/test_cuda_prefill_sm90_fp8.py
        test_step t100_decode_cluster "$L" "${KVATTN_T100:-150}" tests/python/test_cuda_decode_sm90.py -k cluster
        # Session 55: d 128's paged prefill, TMA (a) against the cp.async producer forced (b), A B A B at the
        # clocks each record logs (session 54's page probe had TMA at higher clocks: NOTES item 3).
        [ "${KVATTN_AB100:-1}" = 0 ] || OUT=/tmp/ab100 KVATTN_AB_CHECK=0 KVATTN_AB_A=$L KVATTN_AB_B=$L \
          KVATTN_AB_ENV_B="KVATTN_SM90_TMA=0" KVATTN_AB_SUITES=W3 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_FILTER="=W3 32/8 b8 +512 over 4k p16|=W3 32/8 b8 +2048 over 4k p16|=W3 32/8 b8 +512 over 32k p16|=W3 32/8 b1 +2048 over 32k p16" \
          bash tools/prefill_ab.sh | grep -E "^\[|^W3|^worst|^SM clock" | cut -c1-220
        ;;
      99)  # session 54: branch fence1 (the consumers' reader-fence rule as one threshold a unit; the ring position
        # in 32 bits) against main at d 128 (W6 16x128), then d 64 (W6 32x64).
        w6_ab /tmp/ab99a .dev/main128.so.xz .dev/fe128.so.xz 128 16x128 90 "${KVATTN_T99:-110}" 40
        w6_ab /tmp/ab99b .dev/main64.so.xz .dev/fe64.so.xz 64 32x64 60 "${KVATTN_T99:-110}" 30
        ;;
      98)  # session 54: branch gcdbox (paged TMA boxes of gcd(page, tile) slots where that is 16 or more): its
        # prefill tests at d 256 (16-bit and fp8 caches) and d 128 (pages 32-256 at d 256, 48 and 96 at both
        # take TMA now), memcheck and racecheck on the gcd-box cases, then bench.page_probe at both head dims.
        source tools/device_env.sh
        P="python3 -m pytest -q -p no:cacheprovider"
        for d in 256 128; do
          KVATTN_TEST_HEAD_DIMS=$d test_step t98_d$d "$(device_lib .dev/gb$d.so.xz gb$d)" "${KVATTN_T98:-100}" \
            tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py
        done
        L=$(device_lib .dev/gb256.so.xz gb256)
        for tool in memcheck racecheck; do
          KVATTN_TEST_HEAD_DIMS=256 KVATTN_LIBRARY=$L timeout -k 5 50 compute-sanitizer --tool $tool \
            --report-api-errors no $P tests/python/test_cuda_prefill_sm90.py -k "test_prefill_sm90 and (48 or 96)" \
            > /tmp/t98_$tool.log 2>&1
          echo "$tool rc=$? $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' /tmp/t98_$tool.log | tail -1) $(tail -1 /tmp/t98_$tool.log)"
        done
        for d in 256 128; do
          KVATTN_LIBRARY=$(device_lib .dev/gb$d.so.xz gb$d) PYTHONPATH=python:. timeout -k 5 60 \
            python3 -m bench.page_probe --d $d 2>&1 | tail -9
        done
        ;;
      97)  # session 53: main's full build (build-ci/libkvattn.so.xz: both dtypes, every head dim). The A/B libraries
        # are bf16 only, so the fp16 kernels of the split stages ((192, 128) since session 50, d 256 since 53)
        # never ran on a GPU: every fp16 case of the prefill tests (16-bit and fp8 caches) at every head dim, then
        # the bf16 persistent cases at d 256 and 192, then memcheck on a d 256 fp16 case.
        source tools/device_env.sh
        unset KVATTN_TEST_DTYPES  # (a full build has both dtypes; set, the fp16 cases skip: session 53's first run)
        L=$(device_lib build-ci/libkvattn.so.xz full)
        P="python3 -m pytest -q -p no:cacheprovider"
        test_step t97_fp16 "$L" "${KVATTN_T97:-120}" tests/python/test_cuda_prefill_sm90.py \
          tests/python/test_cuda_prefill_sm90_fp8.py -k fp16
        KVATTN_TEST_HEAD_DIMS="192 256" test_step t97_bf16_persistent_d192_256 "$L" 90 \
          tests/python/test_cuda_prefill_sm90.py -k "persistent and not fp16"
        KVATTN_LIBRARY=$L KVATTN_TEST_HEAD_DIMS=256 timeout -k 5 60 compute-sanitizer --tool memcheck \
          --report-api-errors no $P tests/python/test_cuda_prefill_sm90.py -k "MHA and fp16 and persistent" \
          > /tmp/t97c.log 2>&1
        echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/t97c.log | tail -1) $(tail -1 /tmp/t97c.log)"
        ;;
      96)  # session 53: branch tma1w (whole TMA tiles of <= 8 boxes from the producer's warp 0 alone) against main
        # at d 128 (W6 16x128) then d 64 (W6 32x64; pt64 = main at d 64). Tree at tma1w (its tests).
        R="tma_warps and persistent and (contiguous or 256)"
        w6_ab /tmp/ab96a .dev/main128.so.xz .dev/tm128.so.xz 128 16x128 90 "${KVATTN_T96:-120}" 50 "$R"
        w6_ab /tmp/ab96b .dev/pt64.so.xz .dev/tm64.so.xz 64 32x64 60 "${KVATTN_T96:-120}" 30 "$R"
        ;;
      95)  # session 53: the MUFU forms' rates (bench/mufu_rate.cu), then branch kv256 rebased on main (d 256 on
        # 80-key split stages) against main's d 256 (dd256: dedup51 = main at d 256), its fp8 tests too.
        source tools/device_env.sh
        echo "== mufu_rate"
        timeout 60 .probe/mufu_rate
        echo "== kv256 fp8 tests (d 256)"
        env "${TEST_WORKER_ENV[@]}" KVATTN_TEST_HEAD_DIMS=256 KVATTN_LIBRARY="$(device_lib .dev/kv256.so.xz kv256)" \
          timeout -k 5 90 python3 -m pytest -q -p no:cacheprovider $(test_workers) \
          tests/python/test_cuda_prefill_sm90_fp8.py > /tmp/kv256fp8.log 2>&1
        echo "fp8 rc=$? $(tail -1 /tmp/kv256fp8.log)"
        grep -E "^(FAILED|ERROR)" /tmp/kv256fp8.log | head -8
        echo "== kv256 vs main (d 256)"
        w6_ab /tmp/ab95 .dev/dd256.so.xz .dev/kv256.so.xz 256 8x256 90 180 50
        ;;
      94)  # session 52: branch ptrim (d 64's TMA producer warps without a pair skip the entry and box address).
        OUT=/tmp/ab94 KVATTN_AB_A=.dev/dd64.so.xz KVATTN_AB_B=.dev/pt64.so.xz KVATTN_AB_DIMS=64 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W6 \
          KVATTN_AB_FILTER="=W6 prefill 16k 32x64 full|=W6 prefill 16k 32x64 causal" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=50 \
          bash tools/prefill_ab.sh
        ;;
      52)  # session 52: 92 then 51 (dedup51's libraries), one start for both (starts are what the device lacks).
        echo "== 92"
        bash tools/calls.sh run 92 2>&1 | tail -60
        echo "== 51"
        KVATTN_R51=${KVATTN_R51:-dd} KVATTN_T51=${KVATTN_T51:-"140 90 90 70 30"} bash tools/calls.sh run 51
        ;;
      92)  # session 50: d 64's prefill timeline (main's library with -DKVATTN_PREFILL_TIMELINE=1).
        source tools/device_env.sh
        L=$(device_lib .dev/tl64.so.xz tl64)
        KVATTN_LIBRARY=$L timeout -k 5 150 python3 -m bench.prefill_timeline --d 64 2>&1 | tail -80
        ;;
      87)  # session 48, re-created (its checkout was lost): branch clpad (the cluster form's TMA kernel over a
        # paged cache starts a unit's tiles at its first visible key's 16-slot run: leftpads, window starts).
        F="=W1 32/8 b1 32k p16+scat+lpad|=W1 64/8 b1 32k p16+scat+lpad|=W1 32/8 b1 128k p16+scat+lpad|=W1 32/8 b1 32k p16"
        OUT=/tmp/ab87 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/clpad128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch" KVATTN_AB_SMOKE_K="cluster_paged_leftpad_tma" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=${KVATTN_T87:-200} KVATTN_AB_SAN_TIMEOUT=45 \
          KVATTN_AB_RACE_K="cluster_paged_leftpad_tma and p16_short" \
          KVATTN_AB_MEM_K="cluster_paged_leftpad_tma and (p16_short or p16_batch_s3)" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab87 ab.txt
        ;;
      85)  # session 47 (not run): branch cbatch (batches past the bound on the cluster form, cluster_shape.hpp).
        F="tp|=W1 32/8 b4 32k p16|=W1 32/8 b1 32k p16|=W2 32/8 b128 zipf p16"
        OUT=/tmp/ab85 KVATTN_AB_A=.dev/main128_47.so.xz KVATTN_AB_B=.dev/cbatch128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or few_units" KVATTN_AB_SMOKE_K="cluster_long_batch" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_long_batch and 2-seqlens1" KVATTN_AB_MEM_K="cluster_long_batch and 1-seqlens2" \
          KVATTN_AB_SUITES=W1,W2 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab85 ab.txt
        peers_beside 85 .dev/cbatch128.so.xz W1 "$F"
        ;;
      84)  # session 47: branch ptouch (touch_param_lines at the decode kernels' entry).
        F="=W1 32/8 b1 1k p16 short|=W1 32/8 b1 4k p16 short|=W1 32/8 b1 32k p16|=W1 32/8 b4 32k p16|=W1 4/1 b1 32k p16 tp|=W1 4/1 b4 32k p16 tp|=W1 8/2 b4 32k p16 tp|=W2 32/8 b128 zipf p16|=W4 32/8 b8 4k q4 p16"
        OUT=/tmp/ab84 KVATTN_AB_A=.dev/cgpc128.so.xz KVATTN_AB_B=.dev/ptouch128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=3 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="features or cluster_split_units or few_units" \
          KVATTN_AB_SMOKE_K="cluster_split_units and p16_sinks and 7" KVATTN_AB_SMOKE_TIMEOUT=90 \
          KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="test_features and features0 and False" KVATTN_AB_MEM_K="cluster_split_units and p64_scat and 7" \
          KVATTN_AB_SUITES=W1,W2,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        grep -E "^\[|^W1|^W2|^W4|^worst" "$OUT/ab.txt" | cut -c1-220
        grep -E "^(FAILED|ERROR)" /tmp/ab84/tests.log | cut -c1-300 | head
        ;;
      83)  # session 47: branch cgpc (the cluster pick with one GPC's rate a 16-CTA cluster; 8 first).
        F="tp|=W1 32/8 b1 32k p16|=W1 32/8 b1 128k p16|=W1 32/8 b1 4k p16 short|=W4 32/8 b1 32k q4 p16"
        OUT=/tmp/ab83 KVATTN_AB_A=.dev/csplit128.so.xz KVATTN_AB_B=.dev/cgpc128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or few_units" \
          KVATTN_AB_SMOKE_K="cluster_split_units and p16_sinks and 7" KVATTN_AB_SMOKE_TIMEOUT=90 \
          KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_long_sequences and b1_p64_scat" \
          KVATTN_AB_MEM_K="cluster_split_units and p64_scat and 7" \
          KVATTN_AB_SUITES=W1,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab83 ab.txt
        source tools/device_env.sh; lib=$(device_lib .dev/cgpc128.so.xz cg)
        CLUSTER_RATE_HEADS=1,2,4 CLUSTER_RATE_KEYS=16384,32768,131072 KVATTN_LIBRARY=$lib timeout 80 \
          python3 -m bench.cluster_rate persistent default > "$OUT/cluster_rate.txt" 2>&1
        echo "== cluster_rate rc=$?"; grep "^{" "$OUT/cluster_rate.txt" | cut -c1-150
        peers_beside 83 .dev/cgpc128.so.xz W1,W4 "$F"
        ;;
      82)  # session 47: branch cfuse (S clusters a unit merged in the kernel: arrive_last on tagged words).
        F="tp|=W1 32/8 b1 32k p16|=W1 32/8 b1 4k p16 short"
        OUT=/tmp/ab82 KVATTN_AB_A=.dev/csplit128.so.xz KVATTN_AB_B=.dev/cfuse128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster_split or cluster_bad_page or cluster_cuda_graph or cluster_long or dispatch" \
          KVATTN_AB_SMOKE_K="cluster_split_units and p16_sinks and 7 and not combine" KVATTN_AB_SMOKE_TIMEOUT=90 \
          KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_split_units and p64_scat and 3 and not combine" \
          KVATTN_AB_MEM_K="cluster_split_merge_stray_workspace and 255" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab82 ab.txt
        tail -5 /tmp/ab82/memcheck.log > "$OUT/memcheck_tail.txt" 2> /dev/null
        source tools/device_env.sh
        for v in csplit cfuse; do
          lib=$(device_lib .dev/${v}128.so.xz g$v)
          KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.kernel_gaps "W1 4/1 b1 32k p16 tp" "W1 4/1 b1 128k p16 tp" \
            "W1 8/2 b1 32k p16 tp" "W1 32/8 b1 4k p16 short" > "$OUT/gaps_$v.txt" 2>&1
          echo "== gaps $v rc=$?"; cut -c1-250 "$OUT/gaps_$v.txt" | grep -E "^==|dur"
        done
        ;;
      81)  # session 47: the split cluster form's fixed cost: kernel_gaps and the timeline (main's library).
        source tools/device_env.sh; lib=$(device_lib .dev/csplit128.so.xz cs); tl=$(device_lib .dev/csplittl128.so.xz tl)
        KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.kernel_gaps "W1 4/1 b1 32k p16 tp" "W1 4/1 b1 128k p16 tp" \
          "W1 8/2 b1 32k p16 tp" "W1 32/8 b1 4k p16 short" > "$OUT/gaps.txt" 2>&1
        echo "== gaps rc=$?"; cut -c1-250 "$OUT/gaps.txt" | grep -v "^kvattn: decode_sm90\|Warn\|warn"
        KVATTN_DEBUG_DISPATCH=1 KVATTN_LIBRARY=$tl timeout 100 python3 -m bench.decode_timeline --heads 4/1 \
          --filter "W1 b1 32k p16,W1 b1 128k p16" > "$OUT/timeline.txt" 2>&1
        echo "== timeline rc=$?"; cut -c1-200 "$OUT/timeline.txt" | head -90
        ;;
      80)  # session 47: branch csplit (the cluster form with S > 1 clusters a unit, their partials merged by
           # the split combine; the model picks C and S). Checks of B, then A = main (cwide128 with the
           # combine's 4 warps a row, as main has them by default) against B over W1's batch-1 cases,
           # bench.cluster_rate over 1-2 kv heads (the pick against the persistent kernel), FlashInfer beside B.
        F="tp|=W1 32/8 b1 32k p16|=W1 32/8 b1 128k p16|=W1 32/8 b1 4k p16 short|=W4 32/8 b1 32k q4 p16"
        OUT=/tmp/ab80 KVATTN_AB_A=.dev/cwide128.so.xz KVATTN_AB_B=.dev/csplit128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ENV_A="KVATTN_COMBINE_WIDE_ROWS=1" KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py KVATTN_AB_K="cluster or dispatch or few_units" \
          KVATTN_AB_SMOKE_K="cluster_split_units and p16_sinks and 7" KVATTN_AB_SMOKE_TIMEOUT=90 \
          KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_split_units and p64_scat and 3" \
          KVATTN_AB_MEM_K="cluster_split_units and p16_seqused and 7" \
          KVATTN_AB_SUITES=W1,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        ab_report /tmp/ab80 ab.txt
        grep -h "cluster kernel" /tmp/ab80/*.log | sort | uniq -c | head -20 > "$OUT/dispatch_lines.txt"
        source tools/device_env.sh; lib=$(device_lib .dev/csplit128.so.xz cs)
        CLUSTER_RATE_HEADS=1,2 CLUSTER_RATE_KEYS=16384,32768,131072 KVATTN_LIBRARY=$lib timeout 80 \
          python3 -m bench.cluster_rate persistent default > "$OUT/cluster_rate.txt" 2>&1
        echo "== cluster_rate rc=$?"; grep "^{" "$OUT/cluster_rate.txt" | cut -c1-150
        peers_beside 80 .dev/csplit128.so.xz W1,W4 "$F"
        ;;
      79)  # session 46 (not run: no machine): the split combine's 4 warps a row (KVATTN_COMBINE_WIDE_ROWS=1,
           # opt-in on main): its checks, then A (off) against B (on), one library (main's: build it as
           # .dev/cwide128 with tools/dev_libs.sh cwide128:main:128).
        source tools/device_env.sh; lib=$(device_lib .dev/cwide128.so.xz cg)
        KVATTN_LIBRARY=$lib KVATTN_TEST_HEAD_DIMS=128 timeout 80 python3 -m pytest -q -p no:cacheprovider \
          tests/python/test_append_combine.py tests/python/test_cuda_decode_sm90.py \
          -k "not cpu and (combine or few_units or features or determin)" > "$OUT/tests.txt" 2>&1
        echo "== tests rc=$? $(tail -1 "$OUT/tests.txt")"; grep -E "^(FAILED|ERROR)" "$OUT/tests.txt" | cut -c1-300 | head
        F="tp|=W1 32/8 b4 32k p16"
        OUT=/tmp/ab79 KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/cwide128.so.xz KVATTN_AB_B=.dev/cwide128.so.xz \
          KVATTN_AB_ENV_B="KVATTN_COMBINE_WIDE_ROWS=1" KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="$F" \
          bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        grep -E "^\[|^W1|^worst" "$OUT/ab.txt" | cut -c1-200
        ;;
      78)  # session 46 (not run: no machine): where the persistent kernel's fixed cost goes over few units
           # (call 79 checks and times the combine's 4 warps a row): kernel_gaps on tp cases, the timeline of
           # b1 / b4 32k over 4/1 heads (main's library and its timeline build); on an H200 also crule's
           # prediction (b1 x 32k over 8 kv heads on the cluster form).
        source tools/device_env.sh; lib=$(device_lib .dev/cwide128.so.xz cg); tl=$(device_lib .dev/cmergetl128.so.xz tl)
        KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.kernel_gaps "W1 4/1 b1 32k p16 tp" "W1 4/1 b1 128k p16 tp" \
          "W1 8/2 b1 128k p16 tp" "W1 4/1 b4 32k p16 tp" > "$OUT/gaps.txt" 2>&1
        echo "== gaps rc=$?"; cut -c1-250 "$OUT/gaps.txt" | grep -v "^kvattn: decode_sm90"
        KVATTN_LIBRARY=$tl timeout 100 python3 -m bench.decode_timeline --heads 4/1 --filter "W1 b1 32k p16,W1 b4 32k p16" \
          > "$OUT/timeline.txt" 2>&1
        echo "== timeline rc=$?"; cut -c1-200 "$OUT/timeline.txt" | head -70
        if nvidia-smi -L | grep -q H200; then  # crule's prediction: b1 x 32k over 8 kv heads takes the cluster form
          CLUSTER_RATE_HEADS=8,2 CLUSTER_RATE_KEYS=32768,131072 KVATTN_LIBRARY=$lib timeout 60 \
            python3 -m bench.cluster_rate persistent C8 default 2>&1 | grep "^{" | cut -c1-120
        fi
        ;;
      77)  # session 46: W1's tensor-parallel cases (8/2, 4/1 heads; b1 / b4; 32k / 128k p16): A = main before
           # session 46 against B = cmerge (crule + the longer merge), then FlashInfer beside cmerge; on an
           # H200 also cluster_rate's persistent / default at b1 (crule's prediction for 8 kv heads at 32k).
        F="tp|=W1 32/8 b1 32k p16|=W1 32/8 b1 128k p16"
        OUT=/tmp/ab77 KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/main128_46.so.xz KVATTN_AB_B=.dev/cmerge128.so.xz \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        grep -E "^\[|^W1|^worst" "$OUT/ab.txt" | cut -c1-200
        OUT=/tmp/peers77 KVATTN_LIBRARY=.dev/cmerge128.so.xz KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$F" \
          KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=2 KVATTN_BENCH_TIMEOUT=180 \
          bash tools/gpu_bench.sh W1 > "$OUT/peers.txt" 2>&1
        echo "== peers rc=$?"; tar -xzf /tmp/peers77/bench_W1.tgz -C /tmp/peers77 2> /dev/null
        find /tmp/peers77 -name results.md -exec cp {} "$OUT/" \; ; find /tmp/peers77 -name results.jsonl -exec cp {} "$OUT/" \;
        grep -E "^\| W1" "$OUT/results.md" | cut -c1-200
        if nvidia-smi -L | grep -q H200; then
          source tools/device_env.sh; lib=$(device_lib .dev/cmerge128.so.xz cr)
          KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.cluster_rate persistent default > "$OUT/cluster_rate.txt" 2>&1
          grep "^{" "$OUT/cluster_rate.txt" | cut -c1-120
        fi
        ;;
      76)  # session 46: branch cmerge (crule + the split combine's longer merge): the combine and few-unit
           # checks, then crule (A) against cmerge (B): the persistent kernel at b1 over 1-8 kv heads
           # (cluster_rate, persistent and the rule's pick) and W1 / W2 cases whose combine is short (level).
        source tools/device_env.sh; a=$(device_lib .dev/crule128.so.xz ca); b=$(device_lib .dev/cmerge128.so.xz cb)
        KVATTN_LIBRARY=$b KVATTN_TEST_HEAD_DIMS=128 timeout 200 python3 -m pytest -q -p no:cacheprovider \
          tests/python/test_append_combine.py "tests/python/test_cuda_decode_sm90.py" \
          -k "not cpu and (combine or few_units or features or scan_rounds or skew or determin)" > "$OUT/tests.txt" 2>&1
        echo "== tests rc=$? $(tail -1 "$OUT/tests.txt")"; grep -E "^(FAILED|ERROR)" "$OUT/tests.txt" | cut -c1-300 | head
        for v in a b a b; do
          lib=$a; [ $v = b ] && lib=$b
          KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.cluster_rate persistent default > /tmp/cr_$v.txt 2>&1
          echo "== cluster_rate $v rc=$?"; grep "^{" /tmp/cr_$v.txt | cut -c1-120 | tee -a "$OUT/cluster_rate_$v.txt"
        done
        F="=W1 32/8 b4 32k p16|=W1 32/8 b16 128k p16|=W1 32/8 b16 128k p16 deterministic|=W1 32/8 b4 32k p16 deterministic|=W1 32/8 b1 128k p16 fp8kv|=W2 32/8 b128 zipf p16|=W2 32/8 b256 uniform p16|=W2 32/8 b128 zipf p16 deterministic"
        OUT=/tmp/ab76 KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/crule128.so.xz KVATTN_AB_B=.dev/cmerge128.so.xz \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W1,W2 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab.txt" 2>&1
        grep -E "^\[|^W1|^W2|^worst" "$OUT/ab.txt" | cut -c1-220
        ;;
      75)  # session 46: branch crule (the long-sequence rule as a model of both forms' times): the dispatch and
           # long-sequence checks, bench.cluster_rate (persistent, C16, C8 and the rule's pick at 16k / 32k /
           # 128k over 8-1 kv heads), W1 / W4 b1 with FlashInfer.
        source tools/device_env.sh; lib=$(device_lib .dev/crule128.so.xz cr)
        KVATTN_LIBRARY=$lib KVATTN_TEST_HEAD_DIMS=128 timeout 150 python3 -m pytest -q -p no:cacheprovider \
          tests/python/test_cuda_decode_sm90.py -k "dispatch or cluster_long" > "$OUT/tests.txt" 2>&1
        echo "== tests rc=$? $(tail -1 "$OUT/tests.txt")"; grep -E "^(FAILED|ERROR)" "$OUT/tests.txt" | cut -c1-300 | head
        KVATTN_LIBRARY=$lib timeout 200 python3 -m bench.cluster_rate > "$OUT/cluster_rate.txt" 2>&1
        echo "== cluster_rate rc=$?"; grep "^{" "$OUT/cluster_rate.txt" | cut -c1-150
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W4 32/8 b1 32k q4 p16|=W1 32/8 b1 4k p16 short"
        OUT=/tmp/peers75 KVATTN_LIBRARY=.dev/crule128.so.xz KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$F" \
          KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=2 KVATTN_BENCH_TIMEOUT=180 \
          bash tools/gpu_bench.sh W1,W4 > "$OUT/peers.txt" 2>&1
        echo "== peers rc=$?"; tar -xzf /tmp/peers75/bench_W1_W4.tgz -C /tmp/peers75 2> /dev/null
        find /tmp/peers75 -name results.md -exec cp {} "$OUT/" \; ; find /tmp/peers75 -name results.jsonl -exec cp {} "$OUT/" \;
        grep -E "^\| W[14]" "$OUT/results.md" | cut -c1-260
        ;;
      73)  # session 46: branch codd rewritten (session 45's was lost with its checkout): any cluster size in
           # [8, 16] for 16-bit caches, opt-in KVATTN_DECODE_CLUSTER_ANY_SIZE=1. Checks of codd (the tests
           # set the switch themselves), then A = main (its rules) against B = codd with the switch on (its
           # rules: on an H200 b1 over 8 kv heads takes the cluster form through the bandwidth rule once C
           # > 8 fits), W1 short and b1 long, W4 b1.
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 32/8 b1 32k contig+lpad|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W4 32/8 b1 32k q4 p16|=W1 32/8 b1 1k p16 short|=W1 32/8 b1 2k p16 short|=W1 32/8 b1 4k p16 short"
        mkdir -p "$OUT"
        OUT=/tmp/ab73 KVATTN_AB_A=.dev/main128_46.so.xz KVATTN_AB_B=.dev/codd128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ENV_B="KVATTN_DECODE_CLUSTER_ANY_SIZE=1" KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py KVATTN_AB_K="cluster or dispatch or graph" \
          KVATTN_AB_SMOKE_K="cluster_any_size and 13-paged-16-None" KVATTN_AB_SMOKE_TIMEOUT=90 \
          KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SAN_TIMEOUT=80 \
          KVATTN_AB_RACE_K="cluster_any_size and 14-paged-16-force" \
          KVATTN_AB_MEM_K="cluster_any_size and 9-contiguous-0-force or cluster_bad_page and 13" \
          KVATTN_AB_SUITES=W1,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab_codd.txt" 2>&1
        ab_report /tmp/ab73 ab_codd.txt
        grep -h "cluster kernel" /tmp/ab73/*.log | sort | uniq -c | head > "$OUT/dispatch_lines.txt"
        ;;
      74)  # session 46: FlashInfer beside codd (the switch on) on W1 / W4 b1, and bench.cluster_rate (C = 16,
           # 14, 8 and the persistent kernel: the rate a CTA).
        source tools/device_env.sh; lib=$(device_lib .dev/codd128.so.xz cr)
        KVATTN_LIBRARY=$lib timeout 120 python3 -m bench.cluster_rate > "$OUT/cluster_rate.txt" 2>&1
        echo "== cluster_rate rc=$?"; cut -c1-220 "$OUT/cluster_rate.txt"
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 32/8 b1 32k contig+lpad|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W4 32/8 b1 32k q4 p16|=W1 32/8 b1 1k p16 short|=W1 32/8 b1 2k p16 short|=W1 32/8 b1 4k p16 short"
        KVATTN_DECODE_CLUSTER_ANY_SIZE=1 OUT=/tmp/peers74 KVATTN_LIBRARY=.dev/codd128.so.xz KVATTN_TORCH_OP=0 \
          KVATTN_BENCH_FILTER="$F" KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=3 \
          KVATTN_BENCH_TIMEOUT=240 bash tools/gpu_bench.sh W1,W4 > "$OUT/peers.txt" 2>&1
        echo "== peers rc=$?"; ls /tmp/peers74
        tar -xzf /tmp/peers74/bench_W1_W4.tgz -C /tmp/peers74 2> /dev/null
        find /tmp/peers74 -name results.md -exec cp {} "$OUT/" \; ; find /tmp/peers74 -name results.jsonl -exec cp {} "$OUT/" \;
        grep -E "^\| W[14]" "$OUT/results.md" | cut -c1-260
        ;;
      71)  # session 45: call 70 lean (its machine did not come; ~300 s of device time left) on clong4 (the rule
           # weighs the card's DRAM bandwidth: H100 takes the cluster form for b1 long, H200 keeps the
           # persistent kernel): the rate per CTA, the dispatch and long-sequence checks, W1 / W4 b1 with
           # FlashInfer (on an H200 also with KVATTN_DECODE_CLUSTER_LONG=1: the cluster form there).
        source tools/device_env.sh; lib=$(device_lib .dev/clong4_128.so.xz cr)
        KVATTN_LIBRARY=$lib timeout 100 python3 -m bench.cluster_rate \
          > "$OUT/cluster_rate.txt" 2>&1; echo "== cluster_rate rc=$?"; cut -c1-200 "$OUT/cluster_rate.txt"
        KVATTN_LIBRARY=$lib KVATTN_TEST_HEAD_DIMS=128 timeout 100 python3 -m pytest -q -p no:cacheprovider \
          tests/python/test_cuda_decode_sm90.py -k "dispatch or cluster_long" > "$OUT/tests.txt" 2>&1
        echo "== tests rc=$? $(tail -1 "$OUT/tests.txt")"; grep -E "^(FAILED|ERROR)" "$OUT/tests.txt" | cut -c1-300 | head
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W4 32/8 b1 32k q4 p16"
        modes="default"; nvidia-smi -L | grep -q H200 && modes="default long"
        for m in $modes; do
          env_m=(); [ $m = long ] && env_m=(KVATTN_DECODE_CLUSTER_LONG=1)
          env "${env_m[@]}" OUT=/tmp/peers71_$m KVATTN_LIBRARY=.dev/clong4_128.so.xz KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$F" \
            KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=2 KVATTN_BENCH_TIMEOUT=150 \
            bash tools/gpu_bench.sh W1,W4 > "$OUT/peers_$m.txt" 2>&1
          echo "== peers $m rc=$?"; cp /tmp/peers71_$m/bench_W1_W4.tgz "$OUT/peers_$m.tgz"; grep -E "^W[14]:" "$OUT/peers_$m.txt"
        done
        ;;
      70)  # session 45 (not run: no machine came; superseded by 71): clong3 = clong2 for batch 1 only (a long sequence among short ones would stream on its
           # own clusters' SMs). Checks (dispatch, the long cases now batch 1, cluster, graphs; sanitizers on
           # two long cases), one A/B round of b1 32k p16, then W1 / W4 b1 with FlashInfer for A (main) and B.
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 32/8 b1 32k contig+scat|=W1 32/8 b1 32k contig+lpad|=W1 32/8 b1 32k p16+scat+lpad|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W1 32/8 b1 128k p64|=W1 32/8 b1 128k p16 fp8kv|=W4 32/8 b1 32k q1 p16|=W4 32/8 b1 32k q2 p16|=W4 32/8 b1 32k q4 p16|=W1 32/8 b4 32k p16"
        # First the cluster form's rate per CTA (is 64 CTAs enough on a card with more bandwidth?)
        source tools/device_env.sh; lib=$(device_lib .dev/clong3_128.so.xz cr)
        KVATTN_LIBRARY=$lib PYTHONPATH=python:. timeout 100 python3 -m bench.cluster_rate \
          > "$OUT/cluster_rate.txt" 2>&1; echo "== cluster_rate rc=$?"; cut -c1-200 "$OUT/cluster_rate.txt"
        OUT=/tmp/ab70 KVATTN_AB_A=.dev/main128_45.so.xz KVATTN_AB_B=.dev/clong3_128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=1 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or graph" KVATTN_AB_SMOKE_K="cluster_long_sequences" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_long_sequences and b1_p64_scat" KVATTN_AB_MEM_K="cluster_long_sequences and b1_contig_lpad" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="=W1 32/8 b1 32k p16" bash tools/prefill_ab.sh > "$OUT/ab_clong3.txt" 2>&1
        grep -E "^\[|^W1|^worst" "$OUT/ab_clong3.txt"; grep -E "^(FAILED|ERROR)" /tmp/ab70/tests.log | cut -c1-300 | head
        grep -B2 -A12 "^E " /tmp/ab70/tests.log | head -60 > "$OUT/test_errors.txt"
        for v in a b; do
          lib=.dev/main128_45.so.xz; [ $v = b ] && lib=.dev/clong3_128.so.xz
          OUT=/tmp/peers70_$v KVATTN_LIBRARY=$lib KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$F" \
            KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=3 KVATTN_BENCH_TIMEOUT=240 \
            bash tools/gpu_bench.sh W1,W4 > "$OUT/peers_$v.txt" 2>&1
          echo "== peers $v rc=$?"; cp /tmp/peers70_$v/bench_W1_W4.tgz "$OUT/peers_$v.tgz"; grep -E "^W[14]:" "$OUT/peers_$v.txt"
        done
        ;;
      69)  # session 45: call 68 found clong's rule (clusters >= 7/8 of the SMs) never taken on the H100: it holds
           # 7 clusters of 16, so batch 1 over 8 kv heads takes C = 8 (64 CTAs), which call 67 timed. clong2:
           # the rule at >= 7/16. Call 68's steps, the logs kept small (the tool returns 8 files).
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 32/8 b1 32k contig+scat|=W1 32/8 b1 32k contig+lpad|=W1 32/8 b1 32k p16+scat+lpad|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W1 32/8 b1 128k p16 fp8kv|=W4 32/8 b1 32k q1 p16|=W4 32/8 b1 32k q2 p16|=W4 32/8 b1 32k q4 p16|=W1 32/8 b1 4k p16 short"
        OUT=/tmp/ab69 KVATTN_AB_A=.dev/main128_45.so.xz KVATTN_AB_B=.dev/clong2_128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or graph" KVATTN_AB_SMOKE_K="cluster_long_sequences" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_long_sequences and b2_p64_scat" KVATTN_AB_MEM_K="cluster_long_sequences and b2_contig_lpad" \
          KVATTN_AB_SUITES=W1,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab_clong2.txt" 2>&1
        grep -E "^\[|^W1|^W4|^worst" "$OUT/ab_clong2.txt"; grep -E "^(FAILED|ERROR)" /tmp/ab69/tests.log | cut -c1-300 | head
        grep -B2 -A12 "^E " /tmp/ab69/tests.log | head -60 > "$OUT/test_errors.txt"
        OUT=/tmp/peers69 KVATTN_LIBRARY=.dev/clong2_128.so.xz KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$F" \
          KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=3 KVATTN_BENCH_TIMEOUT=240 \
          bash tools/gpu_bench.sh W1,W4 > "$OUT/peers.txt" 2>&1
        echo "== peers rc=$?"; cp /tmp/peers69/bench_W1_W4/results.md /tmp/peers69/bench_W1_W4/results.jsonl "$OUT/"
        grep -E "^\| W[14]" "$OUT/results.md" | cut -c1-260
        ;;
      68)  # session 45: branch clong (the cluster form past the capacity bound where its TMA kernel can take the
           # stages and its clusters fill >= 7/8 of the SMs; call 67). Checks (cluster, dispatch, long
           # sequences, graphs; racecheck / memcheck on the long cases), W1 / W4 b1 A (main) B (clong), then
           # the same cases with FlashInfer (the kit's fi part; FA4 not carried) on clong: the ratio in one run.
        F="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p64|=W1 32/8 b1 32k contig+scat|=W1 32/8 b1 32k contig+lpad|=W1 32/8 b1 32k p16+scat+lpad|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k contig|=W1 32/8 b1 128k p16|=W1 32/8 b1 128k p16 fp8kv|=W4 32/8 b1 32k q1 p16|=W4 32/8 b1 32k q2 p16|=W4 32/8 b1 32k q4 p16|=W1 32/8 b1 4k p16 short"
        OUT=$OUT/clong KVATTN_AB_A=.dev/main128_45.so.xz KVATTN_AB_B=.dev/clong128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or graph" KVATTN_AB_SMOKE_K="cluster_long_sequences" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=90 \
          KVATTN_AB_RACE_K="cluster_long_sequences and b2_p64_scat" KVATTN_AB_MEM_K="cluster_long_sequences and b2_contig_lpad" \
          KVATTN_AB_SUITES=W1,W4 KVATTN_AB_FILTER="$F" bash tools/prefill_ab.sh > "$OUT/ab_clong.txt" 2>&1
        grep -E "^\[|^W1|^W4|^worst" "$OUT/ab_clong.txt"; grep -E "^(FAILED|ERROR)" "$OUT/clong/tests.log" | cut -c1-300 | head
        OUT=$OUT/peers KVATTN_LIBRARY=.dev/clong128.so.xz KVATTN_TORCH_OP=0 KVATTN_BENCH_FILTER="$F" \
          KVATTN_BENCH_ARGS="--peers flashinfer --flex none" KVATTN_BENCH_MINUTES=3 KVATTN_BENCH_TIMEOUT=240 \
          bash tools/gpu_bench.sh W1,W4 > "$OUT/peers.txt" 2>&1
        echo "== peers rc=$?"; grep -E "^W1|^W4|ready" "$OUT/peers.txt" | cut -c1-220
        ;;
      67)  # session 45: the cluster form (no scan, no combine kernel, TMA refills since ctma) at b1 32k / 128k,
           # where the persistent kernel pays ~12 us of start, ~4 of end spread and ~4 of combine (call 59).
           # Session 39 found the cluster form slower there (b1 32k 61 -> 79 us) before it had producer
           # warps and TMA. A: main, B: main with KVATTN_DECODE_CLUSTER_MAX_KEYS=262144, one library.
        OUT=$OUT/clong KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/main128_45.so.xz KVATTN_AB_B=.dev/main128_45.so.xz \
          KVATTN_AB_ENV_B="KVATTN_DECODE_CLUSTER_MAX_KEYS=262144" KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="=W1 32/8 b1 32k contig|=W1 32/8 b1 32k p16|=W1 32/8 b1 32k p1|=W1 32/8 b1 128k p16|=W1 64/8 b1 32k p16|=W1 32/8 b1 128k p16 fp8kv|=W1 32/8 b1 32k p16+scat+lpad" \
          bash tools/prefill_ab.sh > "$OUT/ab_clong.txt" 2>&1
        grep -E "^\[|^W1|^worst" "$OUT/ab_clong.txt"
        ;;
      64)  # session 44 (not run: its device time was spent): main after ctma landed with the rule at 4 stages a
           # ring (call 63 timed the rule at 2: 2k contiguous +6.5% on the TMA kernel, so 2k now takes the
           # padded one). Checks of the dispatch test's new cases, then W1 short A (session 43's main) B (main).
        cluster_ab main45 .dev/main128_44.so.xz .dev/main128_45.so.xz
        ;;
      63)  # session 44: ctma3 = ctma with the swizzled TMA kernel as a second cluster kernel, picked where every
           # ring holds 2 stages (b1 4k); 1k / 2k stay on the padded one (main's code). Checks (cluster, dispatch,
           # graphs; racecheck / memcheck), then W1 short A (main) B (ctma3), two rounds.
        cluster_ab ctma3 .dev/main128_44.so.xz .dev/ctma3_128.so.xz
        ;;
      62)  # session 44: call 61's variant c (TMA only for rings of >= 2 stages) was as slow as b at 1k / 2k
           # (+3.5-8% against main) with every copy by cp.async: a fixed cost of ctma2 outside the TMA copies.
           # KVATTN_DECODE_TMA=0 (no maps: no TMA, no descriptor prefetch; the swizzled stages remain) tells
           # the prefetch / maps from the layout. W1 short, A = main, B = ctma2 TMA=0, C = ctma2, two rounds.
        w1_short_abc .dev/main128_44.so.xz .dev/ctma2_128.so.xz "KVATTN_DECODE_TMA=0" ""
        ;;
      61)  # session 44: call 60 found ctma 4k p16 -8.5% but 1k / 2k +3 to +8% (the first box lands 2.5 us after
           # its issue). ctma2: the tensor maps prefetched at the kernel's entry (they were ~1 us before the
           # first box); and KVATTN_DECODE_TMA=2 (TMA only for rings of >= 2 stages: 1k / 2k by cp.async).
           # W1 short, A = main, B = ctma2, C = ctma2 + KVATTN_DECODE_TMA=2, two rounds; then kernel_gaps.
        w1_short_abc .dev/main128_44.so.xz .dev/ctma2_128.so.xz "" "KVATTN_DECODE_TMA=2"
        B=$(device_lib .dev/ctma2_128.so.xz ct2)
        for v in b c; do
          env_v=(); [ $v = c ] && env_v=(KVATTN_DECODE_TMA=2)
          env "${env_v[@]}" KVATTN_LIBRARY=$B timeout 90 python3 -m bench.kernel_gaps "W1 32/8 b1 1k p16 short" \
            "W1 32/8 b1 4k p16 short" "W1 32/8 b1 1k contig short" > "$OUT/gaps_$v.txt" 2>&1
          echo "== kernel_gaps $v rc=$?"; grep "kvattn" "$OUT/gaps_$v.txt"
        done
        ;;
      60)  # session 44: branch ctma (the cluster form's 16-bit stages swizzled, whole runs of 16 slots by TMA:
           # a producer lane issues 8 boxes a stage instead of 32 cp.async a lane; session 43's timeline: a
           # stage's copies took 2.2-3.6 us to issue). Checks (the cluster tests with the new cp.async-stage
           # and dispatch cases), W1 short A (main) B (ctma), then both kernels back to back and ctma's timeline.
        cluster_ab ctma .dev/main128_44.so.xz .dev/ctma128.so.xz
        source tools/device_env.sh
        for v in main128_44 ctma128; do
          L=$(device_lib .dev/$v.so.xz ${v:0:4})
          KVATTN_LIBRARY=$L timeout 90 python3 -m bench.kernel_gaps "W1 32/8 b1 1k p16 short" "W1 32/8 b1 4k p16 short" \
            "W1 32/8 b1 1k contig short" > "$OUT/gaps_$v.txt" 2>&1
          echo "== kernel_gaps $v rc=$?"; grep "kvattn" "$OUT/gaps_$v.txt"
        done
        T=$(device_lib .dev/ctmatl128.so.xz ctl)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_ctma.txt" 2>&1
        echo "== timeline rc=$?"; grep -E "^==|first issue|first full|prod addr|last consumed|inbox|written|span" "$OUT/tl_ctma.txt" | head -40
        ;;
      59)  # session 44: two questions before writing more. (a) TMA against cp.async for a short decode's
           # share: bench/ingest.cu at 64 KB a CTA (b1 1k: one 16 KB stage a warp) and 256 KB (b1 4k), every
           # copy kind, 64 / 128 CTAs (binaries built here: .probe/ingest64, .probe/ingest256). (b) the
           # persistent kernel at b1 32k / 128k: its timeline cold and warm (maintl128 = main's decode with
           # stamps) and the decode + combine kernels back to back (bench.kernel_gaps, main128_44).
        nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
        for kb in 64 256; do echo "== ingest $kb KB a CTA"; timeout 60 .probe/ingest$kb; done
        source tools/device_env.sh
        T=$(device_lib .dev/maintl128.so.xz mtl)
        for w in "" --warm; do
          echo "== timeline $w"
          KVATTN_LIBRARY=$T timeout 90 python3 -m bench.decode_timeline $w --filter "W1 b1 32k,W1 b1 128k" 2>&1 | tail -60
        done
        L=$(device_lib .dev/main128_44.so.xz m44)
        KVATTN_LIBRARY=$L timeout 90 python3 -m bench.kernel_gaps "W1 32/8 b1 32k p16" "W1 32/8 b1 128k p16" \
          "W1 32/8 b4 32k p16" 2>&1 | tail -20
        ;;
      58)  # session 43: branch kvsplit (a stage's K rows land on one full mbarrier, its V rows on another:
           # Q K^T and the softmax of the first stage run while V lands; predicted b1 1k -0.3 to -0.4 us,
           # 4k -0.3). Checks, W1 short A (main) B (kvsplit), then both kernels' durations back to back.
        cluster_ab kvsplit .dev/main128_44.so.xz .dev/kvsplit128.so.xz
        source tools/device_env.sh
        for v in main128_44 kvsplit128; do
          L=$(device_lib .dev/$v.so.xz ${v:0:4})
          KVATTN_LIBRARY=$L timeout 90 python3 -m bench.kernel_gaps "W1 32/8 b1 1k p16 short" "W1 32/8 b1 4k p16 short" \
            > "$OUT/gaps_$v.txt" 2>&1
          echo "== kernel_gaps $v rc=$?"; grep "kvattn" "$OUT/gaps_$v.txt"
        done
        ;;
      57)  # session 43: nbar2's two questions (call 56). Its timeline was 1.5 us shorter than main's at b1 1k
           # (span 9.2 vs 10.7) while W1 short timed it level or +1 to +4.5%: the kernels' durations and the
           # gaps between them (bench.kernel_gaps) for main and nbar2. Racecheck reported 96 hazards between
           # store_q_rows and ldmatrix: the hazards' details (threads, addresses), one test.
        source tools/device_env.sh
        export KVATTN_TEST_HEAD_DIMS=128
        for v in main128_44 nbar2_128; do
          L=$(device_lib .dev/$v.so.xz ${v:0:4})
          KVATTN_LIBRARY=$L timeout 90 python3 -m bench.kernel_gaps "W1 32/8 b1 1k p16 short" "W1 32/8 b1 4k p16 short" \
            > "$OUT/gaps_$v.txt" 2>&1
          echo "== kernel_gaps $v rc=$?"; tail -8 "$OUT/gaps_$v.txt"
        done
        L=$(device_lib .dev/nbar2_128.so.xz nbar)
        KVATTN_LIBRARY=$L timeout 120 compute-sanitizer --tool racecheck --report-api-errors no --print-limit 400 \
          python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_decode_sm90.py -k cluster_one_sequence \
          > "$OUT/race.log" 2>&1
        echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$OUT/race.log" | tail -1)"
        grep -E "Race reported|Write access|Read access|by thread|Address|shared" "$OUT/race.log" | cut -c1-220 | head -60
        ;;
      56)  # session 43: branch nbar2 (call 55's nbar redone: the producers waited on a barrier the consumers
           # reached only after their Q, +7 to +15%, and racecheck flagged its bar.arrive hand-off). Now the
           # maker (the last consumer warp) makes the rings' mbarriers and meets the producers on one named
           # barrier and the other consumers on another, all barrier.sync, before loading its own sequence.
        cluster_ab nbar2 .dev/main128_44.so.xz .dev/nbar2_128.so.xz
        source tools/device_env.sh
        T=$(device_lib .dev/nbar2tl128.so.xz n2)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_nbar2.txt" 2>&1
        echo "nbar2 timeline rc=$?"; grep -E "^==|scan done|pdl|prod|copy|first|last|q |checked|inbox|written|d (copy|fill|last|cons|clus)" "$OUT/tl_nbar2.txt"
        ;;
      55)  # session 43: main after the merges (cprod, fast) checked and timed against session 42's main, then
           # branch nbar (the rings' mbarriers made by the last consumer warp behind a named barrier; the
           # producers' cluster arrive relaxed) against it, both with checks; nbar's stamped timeline.
        cluster_ab main43 .dev/main128_42.so.xz .dev/main128_44.so.xz
        cluster_ab nbar .dev/main128_44.so.xz .dev/nbar128.so.xz
        source tools/device_env.sh
        T=$(device_lib .dev/nbartl128.so.xz nt)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_nbar.txt" 2>&1
        echo "nbar timeline rc=$?"; grep -E "^==|scan done|pdl|prod|copy|first|last|q |checked|inbox|written|d (copy|fill|last|cons|clus)" "$OUT/tl_nbar.txt"
        ;;
      54)  # session 43: branch fast (ilroll2 with the copy loop unrolled by 4) and fast2 (+ the CTA's 4-warp
           # state merge rolled); checks on fast2, W1 short A (ilate) B (fast, fast2), fast2's stamped timeline.
        OUT=$OUT/fast2 KVATTN_AB_A=.dev/ilate128.so.xz KVATTN_AB_B=.dev/fast2_128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or device_error or graph" KVATTN_AB_SMOKE_K="cluster_one_sequence" \
          KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="cluster_one_sequence" KVATTN_AB_MEM_K="cluster_bad_page or cluster_fp8_cache" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh > "$OUT/ab_fast2.txt" 2>&1
        grep -E "^\[" "$OUT/ab_fast2.txt"; grep -E "^(FAILED|ERROR)" "$OUT/fast2/tests.log" | cut -c1-300 | head -20
        OUT=$OUT/fast KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/ilate128.so.xz KVATTN_AB_B=.dev/fast128.so.xz \
          KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" \
          bash tools/prefill_ab.sh > "$OUT/ab_fast.txt" 2>&1
        for f in ab_fast ab_fast2; do echo "== $f"; grep -E "^W1|^worst" "$OUT/$f.txt"; done
        source tools/device_env.sh
        T=$(device_lib .dev/fast2tl128.so.xz ft)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_fast2.txt" 2>&1
        echo "fast2 timeline rc=$?"; grep -E "^==|scan done|pdl|prod|copy|first|last|q |checked|inbox|written|d (copy|fill|last|cons|clus)" "$OUT/tl_fast2.txt"
        ;;
      53)  # session 43: branch ilroll (ilate + the cluster form's stage copies in a rolled loop; call 52: a
           # producer takes 2.2-3.6 us to issue one stage, warm or cold) and ilroll2 (+ the rank merge's loop
           # rolled). The checks on ilroll2 (it holds both), W1 short A (ilate) B (ilroll, ilroll2, the copy
           # loop unrolled by 4) two rounds each, then ilroll's stamped timeline.
        OUT=$OUT/ilroll2 KVATTN_AB_A=.dev/ilate128.so.xz KVATTN_AB_B=.dev/ilroll2_128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or device_error or graph" KVATTN_AB_SMOKE_K="cluster_one_sequence" \
          KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="cluster_one_sequence" KVATTN_AB_MEM_K="cluster_bad_page or cluster_fp8_cache" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh > "$OUT/ab2.txt" 2>&1
        grep -E "^\[" "$OUT/ab2.txt"; grep -E "^(FAILED|ERROR)" "$OUT/ilroll2/tests.log" | cut -c1-300 | head -20
        for v in ilroll ilroll4_; do
          OUT=$OUT/$v KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/ilate128.so.xz KVATTN_AB_B=.dev/${v}128.so.xz \
            KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" \
            bash tools/prefill_ab.sh > "$OUT/ab_$v.txt" 2>&1
        done
        for f in ab_ilroll ab2 ab_ilroll4_; do echo "== $f"; grep -E "^W1|^worst" "$OUT/$f.txt"; done
        source tools/device_env.sh
        T=$(device_lib .dev/ilrolltl128.so.xz rt)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_ilroll.txt" 2>&1
        echo "ilroll timeline rc=$?"; grep -E "^==|sequence|scan done|prod|copy|first|last|inbox|written|d (copy|fill|last|cons|clus)" "$OUT/tl_ilroll.txt"
        ;;
      52)  # session 43: the cluster form's start after cprod landed (call 51: b1 1k's first copy at 6.9 us, 2 us
           # later than before; entry -> sequence known 2.8 us, entries landed -> first copy issued 3.3 us).
           # Branch ilate (the barrier after the rings' mbarrier inits moved after the sequence loads): its
           # cluster tests, racecheck, memcheck, W1 short A (main) B (ilate) two rounds; then timelines with
           # more stamps (branch tlx: "prod piece" = the init barrier passed, "prod keys" = the producer's
           # cluster arrive done, "copy 1 issued" = its entries selected, "copy 8 issued" = stage 0's
           # copies issued) of main cold / warm and of ilate cold.
        OUT=$OUT/ilate KVATTN_AB_A=.dev/main128_43.so.xz KVATTN_AB_B=.dev/ilate128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or graph" KVATTN_AB_SMOKE_K="cluster_one_sequence" \
          KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="cluster_one_sequence" KVATTN_AB_MEM_K="cluster_bad_page" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh
        grep -E "^(FAILED|ERROR)" "$OUT/ilate/tests.log" | cut -c1-300 | head -20
        source tools/device_env.sh
        T=$(device_lib .dev/tlx128.so.xz tx)
        for a in "" "--warm" "--contig"; do
          n=tlx$(echo "$a" | tr -d ' -')
          KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" $a > "$OUT/$n.txt" 2>&1
          echo "tlx '$a' rc=$?"; grep -vE "^$" "$OUT/$n.txt" | head -60
        done
        T=$(device_lib .dev/ilatetl128.so.xz it)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_ilate.txt" 2>&1
        echo "ilate timeline rc=$?"; grep -vE "^$" "$OUT/tl_ilate.txt" | head -60
        ;;
      51)  # session 42, branch cprod (written after call 50's question, measured by nobody yet): the cluster form with
           # 4 producer warps (a ring each, full / empty mbarriers) beside its 4 consumer warps; checks, then
           # W1 short, main (A) against cprod (B), two rounds
        OUT=$OUT/cprod KVATTN_AB_A=.dev/main128_42.so.xz KVATTN_AB_B=.dev/cprod128.so.xz KVATTN_AB_DIMS=128 \
          KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py \
          KVATTN_AB_K="cluster or dispatch or device_error or graph" KVATTN_AB_SMOKE_K="cluster_one_sequence" \
          KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="cluster_one_sequence" KVATTN_AB_MEM_K="cluster_bad_page or cluster_fp8_cache" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh
        grep -E "^(FAILED|ERROR)" "$OUT/cprod/tests.log" | cut -c1-300 | head -20
        source tools/device_env.sh
        T=$(device_lib .dev/cprodtl128.so.xz ct)  # its timeline (the consumers' and the producers' stamps)
        KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_cprod.txt" 2>&1
        echo "timeline rc=$?"; grep -E "^==|first issue|first full|last issued|last consumed|inbox full|p0 written" "$OUT/tl_cprod.txt"
        ;;
      50)  # session 42's question for the next session: where the cluster form's b1 4k time goes when it is not
           # the memory (bench/ingest.cu: 64 SMs take a CTA's 256 KB from HBM in 4-6 us; the kernel spends ~14
           # us from its first copy to its last stage). Timelines cold / warm (--warm: code, data and
           # translations in L2), paged / contiguous; then ncu's per-instruction stall samples of the 4k case.
        source tools/device_env.sh
        T=$(device_lib .dev/maintl128.so.xz t)
        for a in "" "--contig" "--warm" "--contig --warm"; do
          n=tl$(echo "$a" | tr -d ' -')
          KVATTN_LIBRARY=$T timeout 60 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" $a > "$OUT/$n.txt" 2>&1
          echo "timeline '$a' rc=$?"; grep -E "^==|first issue|first full|last consumed|inbox full|p0 written" "$OUT/$n.txt"
        done
        # The stall reasons and the SASS lines with the most stall samples (tools/ncu_prefill.sh's recipe),
        # on the cluster kernel, contiguous (no page entries): 4k and 1k.
        OUT=$OUT/ncu KVATTN_LIBRARY=.dev/main128_42.so.xz KVATTN_NCU_KERNEL=decode_cluster \
          KVATTN_NCU_CASES="W1 32/8 b1 4k contig short;W1 32/8 b1 1k contig short" bash tools/ncu_prefill.sh
        ;;
      49)  # session 42, branch entries: the cluster form's page entries before its copies; its cluster tests, then
           # W1's short cases, main (A) against it (B), two rounds (no sanitizers: the budget's last 250 s)
        source tools/device_env.sh
        B=$(device_lib .dev/ent128.so.xz b)
        KVATTN_TEST_HEAD_DIMS=128 KVATTN_LIBRARY=$B timeout 60 python3 -m pytest -q -p no:cacheprovider $(test_workers) \
          tests/python/test_cuda_decode_sm90.py -k cluster > "$OUT/tests.log" 2>&1
        echo "tests rc=$? $(tail -1 "$OUT/tests.log")"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head
        OUT=$OUT/ab KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/main128_41.so.xz KVATTN_AB_B=.dev/ent128.so.xz KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh
        ;;
      48)  # session 42: call 47's checks on the full sm_90a library (build-ci, main) and the push build's timeline,
           # then the full run's call B (W1,W2 with every peer) in what is left of the call's 600 s
        T0=$(date +%s)
        source tools/device_env.sh
        L=$(device_lib build-ci/libkvattn.so.xz full)
        KVATTN_TEST_HEAD_DIMS=64 KVATTN_LIBRARY=$L timeout 120 python3 -m pytest -q -p no:cacheprovider $(test_workers) \
          tests/python/test_cuda_mla_sm90.py -k "rule or hopper or twice or deterministic or splits" > "$OUT/mla.log" 2>&1
        echo "mla tests rc=$? $(tail -1 "$OUT/mla.log")"; grep -E "^(FAILED|ERROR)" "$OUT/mla.log" | head
        KVATTN_TEST_HEAD_DIMS=128 KVATTN_LIBRARY=$L timeout 100 python3 -m pytest -q -p no:cacheprovider $(test_workers) \
          tests/python/test_cuda_decode_sm90.py -k "cluster_bad_page or cluster_asks or cluster_one" > "$OUT/clu.log" 2>&1
        echo "cluster tests rc=$? $(tail -1 "$OUT/clu.log")"; grep -E "^(FAILED|ERROR)" "$OUT/clu.log" | head
        T=$(device_lib .dev/pushtl128.so.xz t)
        KVATTN_LIBRARY=$T timeout 90 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k,W1 b4 32k p16,W1 b1 128k" > "$OUT/tl.txt" 2>&1
        echo "timeline rc=$? [$(($(date +%s) - T0)) s]"
        left=$((540 - $(date +%s) + T0))
        KVATTN_LIBRARY=$L KVATTN_BENCH_TIMEOUT=$left KVATTN_BENCH_MINUTES=$(python3 -c "print(round(($left - 60) / 60, 1))") \
          bash tools/gpu_bench.sh W1,W2
        echo "[call 48: $(($(date +%s) - T0)) s]"; grep -v Warning "$OUT/tl.txt" | head -20
        ;;
      47)  # session 41, main after the merges: the MLA default (the dispatch rule's test and the kernels' cases on a d 64
           # build of main), the cluster bad-page cases the review added, then the push build's timeline at b1 1k
           # / 4k (what the merge's push left)
        source tools/device_env.sh
        M=$(device_lib .dev/main64_41.so.xz m)
        KVATTN_TEST_HEAD_DIMS=64 KVATTN_LIBRARY=$M timeout 150 python3 -m pytest -q -p no:cacheprovider \
          tests/python/test_cuda_mla_sm90.py -k "rule or hopper or twice or deterministic or splits" > "$OUT/mla.log" 2>&1
        echo "mla tests rc=$? $(tail -1 "$OUT/mla.log")"; grep -E "^(FAILED|ERROR)" "$OUT/mla.log" | head
        C=$(device_lib .dev/main128_41.so.xz c)  # the review's bad-page cases at C = 8 and with fp8 caches
        KVATTN_TEST_HEAD_DIMS=128 KVATTN_LIBRARY=$C timeout 120 python3 -m pytest -q -p no:cacheprovider \
          tests/python/test_cuda_decode_sm90.py -k "cluster_bad_page or cluster_asks or cluster_one" > "$OUT/clu.log" 2>&1
        echo "cluster tests rc=$? $(tail -1 "$OUT/clu.log")"; grep -E "^(FAILED|ERROR)" "$OUT/clu.log" | head
        T=$(device_lib .dev/pushtl128.so.xz t)
        KVATTN_LIBRARY=$T timeout 120 python3 -m bench.decode_timeline --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl.txt" 2>&1
        echo "timeline rc=$?"; grep -v Warning "$OUT/tl.txt" | head -70
        ;;
      46)  # calls 43 and 44 in one (device starts are scarce): push's checks and A / B, then wide2's d 512 checks and
           # one round of its A / B while the call's time lasts
        T0=$(date +%s)
        OUT=$OUT/push KVATTN_AB_A=.dev/clws128.so.xz KVATTN_AB_B=.dev/push128.so.xz \
          KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_decode_sm90.py tests/python/test_cuda_kernels.py" \
          KVATTN_AB_K="cluster or dispatch or device_error or balanced or graph" \
          KVATTN_AB_SMOKE_K="cluster_one_sequence or cluster_asks" KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 \
          KVATTN_AB_SAN_TIMEOUT=60 KVATTN_AB_RACE_K="cluster_one_sequence" \
          KVATTN_AB_MEM_K="cluster_bad_page or cluster_fp8_cache" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh
        echo "push failures:"; grep -E "^(FAILED|ERROR)" "$OUT/push/tests.log" | cut -c1-300 | head -20
        echo "[call 46: $(($(date +%s) - T0)) s after part 1]"
        export KVATTN_SM90_WIDE=0
        OUT=$OUT/wide KVATTN_AB_A=.dev/wide2_512.so.xz KVATTN_AB_B=.dev/wide2_512.so.xz KVATTN_AB_ENV_B="KVATTN_SM90_WIDE=1" \
          KVATTN_AB_DIMS=512 KVATTN_AB_ROUNDS=1 \
          KVATTN_AB_TESTS="tests/python/test_cuda_wide_sm90.py tests/python/test_head_dim_512.py" \
          KVATTN_AB_SMOKE_K="test_wide_sm90 and splits" KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 \
          KVATTN_AB_SAN_TIMEOUT=60 KVATTN_AB_RACE_K="test_wide_sm90 and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="d512" bash tools/prefill_ab.sh
        echo "wide failures:"; grep -E "^(FAILED|ERROR)" "$OUT/wide/tests.log" | cut -c1-300 | head -20
        ;;
      44)  # branch wide2 (session 41: wide rebased on main): the d 512 decode kernel's checks, then W1's d512
           # cases, the portable (512, 512) kernel (A) vs the sm_90a wide kernel (B), one library
        export KVATTN_SM90_WIDE=0
        KVATTN_AB_A=.dev/wide2_512.so.xz KVATTN_AB_B=.dev/wide2_512.so.xz KVATTN_AB_ENV_B="KVATTN_SM90_WIDE=1" \
          KVATTN_AB_DIMS=512 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_wide_sm90.py tests/python/test_head_dim_512.py" \
          KVATTN_AB_SMOKE_K="test_wide_sm90 and splits" KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 \
          KVATTN_AB_SAN_TIMEOUT=90 KVATTN_AB_RACE_K="test_wide_sm90 and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="d512" bash tools/prefill_ab.sh
        echo "failures:"
        grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-300 | head -20
        ;;
      45)  # branch wide2: the sm_90a MLA stack (mla4 P v ahead, mla5 key splits, mla6 the <= 16-row kernel): its
           # checks with the kernel on, then W5: the portable kernel (A, the default today) vs the MLA kernel
           # (B), one library; then 16 heads: the rows kernel (A) vs the 64-row kernel (B)
        export KVATTN_SM90_MLA=0
        KVATTN_AB_A=.dev/wide2_64.so.xz KVATTN_AB_B=.dev/wide2_64.so.xz KVATTN_AB_ENV_B="KVATTN_SM90_MLA=1" \
          KVATTN_AB_DIMS=64 KVATTN_AB_ROUNDS=2 KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py \
          KVATTN_AB_SMOKE_K="splits and plan" KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 \
          KVATTN_AB_SAN_TIMEOUT=90 KVATTN_AB_RACE_K="test_mla_sm90_rows and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5" bash tools/prefill_ab.sh
        echo "failures:"
        grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-300 | head -20
        export KVATTN_SM90_MLA=1
        OUT=$OUT/rows KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/wide2_64.so.xz KVATTN_AB_B=.dev/wide2_64.so.xz \
          KVATTN_AB_ENV_B="KVATTN_SM90_MLA_ROWS=0" KVATTN_AB_ROUNDS=1 KVATTN_AB_SUITES=W5 \
          KVATTN_AB_FILTER="W5 MLA 16/1" bash tools/prefill_ab.sh
        ;;
      7)
        export KVATTN_SM90_WIDE=0  # A: the portable (512, 512) kernel
        KVATTN_AB_A=.dev/wide512.so.xz KVATTN_AB_B=.dev/wide512.so.xz KVATTN_AB_ENV_B="KVATTN_SM90_WIDE=1" \
          KVATTN_AB_TESTS="tests/python/test_cuda_wide_sm90.py tests/python/test_head_dim_512.py" \
          KVATTN_AB_SMOKE_K="test_wide_sm90 and splits" KVATTN_AB_RACE_K="test_wide_sm90 and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="d512" \
          bash tools/prefill_ab.sh
        ;;
      8)
        export KVATTN_SM90_MLA=1
        KVATTN_AB_A=.dev/mla4.so.xz KVATTN_AB_B=.dev/wide64.so.xz KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py \
          KVATTN_AB_SMOKE_K="splits and plan" KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_RACE_K="test_mla_sm90_rows and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5 MLA 128/1" \
          bash tools/prefill_ab.sh
        OUT=$OUT/rows KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/wide64.so.xz KVATTN_AB_B=.dev/wide64.so.xz \
          KVATTN_AB_ENV_B="KVATTN_SM90_MLA_ROWS=0" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5 MLA 16/1" \
          bash tools/prefill_ab.sh
        ;;
      9)
        export KVATTN_SM90_MLA=1
        # (the tests of the wide tree, less what mla4 does not have: the rows kernel, splits)
        KVATTN_AB_A=.dev/mla.so.xz KVATTN_AB_B=.dev/mla4.so.xz KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py \
          KVATTN_AB_K="not rows and not split and not deterministic and not rule and not hopper" \
          KVATTN_AB_SMOKE_K="test_mla_sm90 and hnd and not rows" KVATTN_AB_RACE_K="test_mla_sm90 and hnd and not rows" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5 MLA 128/1" \
          bash tools/prefill_ab.sh
        ;;
      12)
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/e4m3dead128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS=tests/python/test_cuda_prefill_sm90_fp8.py KVATTN_AB_SMOKE_K="fp8_q_variants and persistent" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="fp8_q_variants and split" KVATTN_AB_MEM_K="fp8_q_variants and persistent" \
          bash tools/prefill_ab.sh
        fp8_rows 60 a:.dev/main128.so.xz b:.dev/e4m3dead128.so.xz
        ;;
      15)
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/main128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS="tests/python/test_cuda_kernels.py tests/python/test_negative_strides.py tests/python/test_cuda_decode_sm90.py tests/python/test_cuda_prefill_sm90.py" \
          KVATTN_AB_SMOKE_K="offending_sequence_with_rotary or longest_sequence or q_at_odd_elements" \
          KVATTN_AB_K="offending_sequence_with_rotary or longest_sequence or negative_strides or decode_sm90 or persistent or workspace_overlapping" \
          KVATTN_AB_SMOKE_TIMEOUT=120 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="q_at_odd_elements" \
          KVATTN_AB_MEM_K="offending_sequence_with_rotary or longest_sequence or q_at_odd_elements or negative_strides" \
          bash tools/prefill_ab.sh
        ;;
      23)
        source tools/device_env.sh
        lib=$(device_lib "${LIB:-.dev/main128.so.xz}" m)
        for c in "W3 32/8 b1 +2048 over 32k p16" "W3 32/8 b1 +2048 over 32k p16 fp8kv"; do
          name=$(echo "$c" | tr -c 'a-z0-9\n' '_')
          KVATTN_LIBRARY="$lib" timeout -k 5 150 ncu --kernel-name regex:prefill --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
            --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
            --section Occupancy python3 -m bench.profile_case "$c" --calls 4 > "$OUT/ncu_$name.txt" 2>&1
          echo "ncu $c rc=$? $(grep -c . "$OUT/ncu_$name.txt") lines"
          grep -E "Issue Slots Busy|Executed Ipc|No Eligible|Shared Memory|Bank Conflicts|Duration" "$OUT/ncu_$name.txt" | head -12
        done
        ;;
      35)  # branch p192t ((192, 128) on 80-key tiles, session 38): checks at d 192, then W6 16x192/128 A B A B
        KVATTN_AB_A=.dev/main192.so.xz KVATTN_AB_B=.dev/p192t192.so.xz KVATTN_AB_DIMS=192 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          KVATTN_AB_SMOKE_TIMEOUT=100 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SUITES=W6 KVATTN_AB_FILTER="16x192/128" \
          bash tools/prefill_ab.sh
        ;;
      34)  # main since pcpasync landed (session 38, measured at d 128 only): its checks at d 64 and d 256, TMA on
           # and off; then branch d64x (rebased on it) timed against main at d 64, W6 32x64 A B A B (no checks)
        for dim in 64 256; do
          for env_b in "" "KVATTN_SM90_TMA=0"; do
            echo "== d $dim ${env_b:-TMA on}"
            OUT=$OUT/d${dim}${env_b:+_notma} KVATTN_AB_A=.dev/main$dim.so.xz KVATTN_AB_B=.dev/main$dim.so.xz \
              KVATTN_AB_ENV_B="$env_b" KVATTN_AB_DIMS=$dim KVATTN_AB_ROUNDS=0 KVATTN_AB_SMOKE_TIMEOUT=70 \
              KVATTN_AB_TEST_TIMEOUT=120 KVATTN_AB_SAN_TIMEOUT=40 bash tools/prefill_ab.sh
          done
        done
        echo "== d64x against main, W6 32x64"
        OUT=$OUT/d64x KVATTN_AB_A=.dev/main64.so.xz KVATTN_AB_B=.dev/d64x.so.xz KVATTN_AB_CHECK=0 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_SUITES=W6 KVATTN_AB_FILTER="32x64" bash tools/prefill_ab.sh
        ;;
      28)  # branch d64x (session 36: d 64's P in registers, the lean tile loop): checks, then W6 32x64 A B A B
        KVATTN_AB_A=.dev/main64.so.xz KVATTN_AB_B=.dev/d64x.so.xz KVATTN_AB_DIMS=64 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          KVATTN_AB_SMOKE_TIMEOUT=100 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SUITES=W6 KVATTN_AB_FILTER="32x64" \
          bash tools/prefill_ab.sh
        ;;
      29)  # branch pcpasync (session 36: the 16-bit cp.async producer lean): checks, then W3 page 1 and W6 A B A B
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/pcp128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS=tests/python/test_cuda_prefill_sm90.py KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 \
          KVATTN_AB_SAN_TIMEOUT=50 KVATTN_AB_SUITES=W3,W6 \
          KVATTN_AB_FILTER="W3 32/8 b8 +512 over 32k p1|W3 32/8 b1 +2048 over 32k p1|=W3 32/8 b1 +2048 over 32k p16|W6 prefill 16k 16x128 full" \
          bash tools/prefill_ab.sh
        ;;
      30)  # pcpasync with the cp.async producer on every layout (KVATTN_SM90_TMA=0): its checks, W6 A B A B
        export KVATTN_SM90_TMA=0
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/pcp128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS=tests/python/test_cuda_prefill_sm90.py KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 \
          KVATTN_AB_SAN_TIMEOUT=50 KVATTN_AB_SUITES=W6,W3 \
          KVATTN_AB_FILTER="W6 prefill 16k 16x128|=W3 32/8 b8 +512 over 4k p16" bash tools/prefill_ab.sh
        ;;
      31)  # W3 over short prefixes: kernel gaps (main) and the timeline build's stamps (branch w3short)
        source tools/device_env.sh
        A=$(device_lib .dev/main128.so.xz a)
        T=$(device_lib .dev/w3tl128.so.xz t)
        B1="W3 32/8 b1 +512 over 4k p16"
        B8="W3 32/8 b8 +512 over 4k p16"
        KVATTN_LIBRARY=$A timeout 200 python3 -m bench.kernel_gaps "$B1" "$B8" > "$OUT/gaps.txt" 2>&1
        echo "kernel_gaps rc=$?"; tail -20 "$OUT/gaps.txt"
        for c in "$B1" "$B8"; do KVATTN_LIBRARY=$T timeout 120 python3 -m bench.prefill_timeline --bench-case "$c"; done \
          > "$OUT/tl.txt" 2>&1
        KVATTN_LIBRARY=$T timeout 120 python3 -m bench.prefill_timeline --case w3 --batch 1 --d 128 >> "$OUT/tl.txt" 2>&1
        echo "timeline rc=$?"; tail -40 "$OUT/tl.txt"
        ;;
      32)  # W3 over short prefixes: the existing switches, same library, timing only
        for e in KVATTN_SM90_DIAG=12 KVATTN_SM90_DIAG=4 KVATTN_SM90_TMA=0 KVATTN_SM90_QROT=1 KVATTN_SM90_PERSISTENT=1; do
          OUT=$OUT/${e//=/_} KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/main128.so.xz KVATTN_AB_ENV_B=$e \
            KVATTN_AB_CHECK=0 KVATTN_AB_ROUNDS=1 KVATTN_AB_SUITES=W3 \
            KVATTN_AB_FILTER="=W3 32/8 b1 +512 over 4k p16|=W3 32/8 b8 +512 over 4k p16" bash tools/prefill_ab.sh
        done
        ;;
      36)  # the decode kernel's cluster form (session 39): its checks, then W1's b1 cases, persistent (A) vs cluster (B)
        export KVATTN_DECODE_CLUSTER=0  # A: the persistent kernel and its combine; B turns the cluster form on
        KVATTN_AB_A=.dev/clu128.so.xz KVATTN_AB_B=.dev/clu128.so.xz KVATTN_AB_ENV_B="KVATTN_DECODE_CLUSTER=16" \
          KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_decode_sm90.py tests/python/test_cuda_kernels.py" \
          KVATTN_AB_SMOKE_K="cluster_one_sequence" KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=240 \
          KVATTN_AB_SAN_TIMEOUT=90 KVATTN_AB_RACE_K="cluster_one_sequence or (cluster_features and features2)" \
          KVATTN_AB_MEM_K="cluster_bad_page or (cluster_layouts_edges and paged-1)" \
          KVATTN_AB_SUITES=W1 \
          KVATTN_AB_FILTER="short|=W1 32/8 b1 32k p16|=W1 32/8 b1 128k p16" \
          bash tools/prefill_ab.sh
        echo "failures other than the head dims this d 128 build lacks:"
        grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | grep -v -E "head_dims|odd_head|wide_rows|rotary_dims" | cut -c1-300 | head -20
        source tools/device_env.sh
        L=$(device_lib .dev/clu128.so.xz b)
        for mode in 0 16; do
          KVATTN_DECODE_CLUSTER=$mode KVATTN_LIBRARY=$L timeout 60 python3 -m bench.kernel_gaps \
            "W1 32/8 b1 1k p16 short" "W1 32/8 b1 4k p16 short" > "$OUT/gaps_$mode.txt" 2>&1
          echo "kernel_gaps cluster=$mode rc=$?"; tail -8 "$OUT/gaps_$mode.txt"
        done
        ;;
      39)  # the cluster form's timeline (session 39's build of branch cluster): where b1 1k / 4k's ~13 / ~19 us go,
           # against the persistent kernel's (KVATTN_DECODE_CLUSTER=0) in the same library
        source tools/device_env.sh
        T=$(device_lib .dev/clutl128.so.xz t)
        for mode in 16 0; do
          KVATTN_DECODE_CLUSTER=$mode KVATTN_LIBRARY=$T timeout 120 python3 -m bench.decode_timeline \
            --filter "W1 b1 1k,W1 b1 4k" > "$OUT/tl_$mode.txt" 2>&1
          echo "timeline cluster=$mode rc=$?"; cat "$OUT/tl_$mode.txt" | grep -v Warning | head -60
        done
        ;;
      43)  # branch push (session 41): the cluster form's merge pushed by st.async; its checks, then W1's short
           # cases, clws (A: the pull merge, with the workspace fix) vs push (B), both on the cluster form
        KVATTN_AB_A=.dev/clws128.so.xz KVATTN_AB_B=.dev/push128.so.xz \
          KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_decode_sm90.py tests/python/test_cuda_kernels.py" \
          KVATTN_AB_K="cluster or dispatch or device_error or balanced or graph" \
          KVATTN_AB_SMOKE_K="cluster_one_sequence or cluster_asks" KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 \
          KVATTN_AB_SAN_TIMEOUT=60 KVATTN_AB_RACE_K="cluster_one_sequence" \
          KVATTN_AB_MEM_K="cluster_bad_page or cluster_fp8_cache" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short" bash tools/prefill_ab.sh
        echo "failures:"
        grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-300 | head -20
        ;;
      38)  # call 36 made lean (session 39's device time ran short): the cluster form's tests and the dispatch's, the
           # device-error tests, racecheck / memcheck, then W1's short and b1 32k cases, persistent (A) vs cluster (B)
        export KVATTN_DECODE_CLUSTER=0
        KVATTN_AB_A=.dev/clu128.so.xz KVATTN_AB_B=.dev/clu128.so.xz KVATTN_AB_ENV_B="KVATTN_DECODE_CLUSTER=16" \
          KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_decode_sm90.py tests/python/test_cuda_kernels.py" \
          KVATTN_AB_K="cluster or dispatch or device_error or balanced" \
          KVATTN_AB_SMOKE_K="cluster_one_sequence" KVATTN_AB_SMOKE_TIMEOUT=60 KVATTN_AB_TEST_TIMEOUT=150 \
          KVATTN_AB_SAN_TIMEOUT=60 KVATTN_AB_RACE_K="cluster_one_sequence" \
          KVATTN_AB_MEM_K="cluster_bad_page or (cluster_layouts_edges and paged-1 and False)" \
          KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="short|=W1 32/8 b1 32k p16" bash tools/prefill_ab.sh
        echo "failures:"
        grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-300 | head -20
        ;;
      37)  # the cluster form's diagnosis (session 39): resident clusters, its tests' failures, C = 0 / 8 / 16 on W1 b1
        source tools/device_env.sh
        L=$(device_lib .dev/clu128.so.xz b)
        export KVATTN_TEST_HEAD_DIMS=128
        for kv in bf16 fp8; do
          KV=$kv KVATTN_DEBUG_DISPATCH=1 KVATTN_LIBRARY=$L timeout 60 python3 -c "
import os, torch, kvattn
q = torch.randn(1, 1, 32, 128, device='cuda', dtype=torch.bfloat16)
k = torch.randn(1, 4096, 8, 128, device='cuda', dtype=torch.bfloat16)
v = torch.randn_like(k)
if os.environ['KV'] == 'fp8': k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
kvattn.flash_attn_with_kvcache(q, k, v); torch.cuda.synchronize()" 2>&1 | grep -i "kvattn\|error" | head -3
        done
        KVATTN_LIBRARY=$L timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_decode_sm90.py \
          tests/python/test_cuda_kernels.py -n 8 2>&1 | grep -E "FAILED|passed|failed" | grep -v "head_dims\|odd_head" | head -30
        for mode in 0 8 16; do
          KVATTN_DECODE_CLUSTER=$mode KVATTN_DECODE_CLUSTER_MAX_KEYS=100000000 KVATTN_LIBRARY=$L \
            timeout -k 5 100 python3 -m bench.run --suite W1 \
            --filter "=W1 32/8 b1 1k p16 short|=W1 32/8 b1 4k p16 short|=W1 32/8 b1 32k p16|=W1 32/8 b1 128k p16" \
            --no-peers --flex none --warmup-s 1 --max-minutes 1 --out "$OUT/c$mode" > "$OUT/c$mode.log" 2>&1
          echo "cluster=$mode rc=$?"; grep -E "^\[" "$OUT/c$mode.log" | cut -c1-100
        done
        ;;
      33)  # branch sdec (batch 1's direct start on the sm_90a decode kernel): checks, then W1's b1 cases A B A B
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/sdec128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py KVATTN_AB_SMOKE_K="batch1_direct_start" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="batch1_direct_start and (kw1- or kw3- or kw6-)" KVATTN_AB_MEM_K="batch1_direct_start" \
          KVATTN_AB_SUITES=W1,W2 KVATTN_AB_FILTER="short|=W1 32/8 b1 32k p16|=W1 32/8 b1 128k p16|=W1 32/8 b4 32k p16|=W2 32/8 b128 zipf p16" \
          bash tools/prefill_ab.sh
        # Where the short decode's time goes now (decode kernel, the combine's tail after it), A and B.
        source tools/device_env.sh
        for lib in a:.dev/main128.so.xz b:.dev/sdec128.so.xz; do
          KVATTN_LIBRARY=$(device_lib "${lib#*:}" "${lib%%:*}") timeout 60 python3 -m bench.kernel_gaps \
            "W1 32/8 b1 1k p16 short" "W1 32/8 b1 4k p16 short" > "$OUT/gaps_${lib%%:*}.txt" 2>&1
          echo "kernel_gaps ${lib%%:*} rc=$?"; tail -8 "$OUT/gaps_${lib%%:*}.txt"
        done
        ;;
      *) echo "no call $2" >&2; exit 2 ;;
    esac
    ;;
  *) echo "usage: tools/calls.sh [libs|show|run N]" >&2; exit 2 ;;
esac
