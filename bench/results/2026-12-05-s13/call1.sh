# session 13, device call 1 (refused: no machine could be started in session 13): session 9's prepared call2, run
# as it is, for the next session's first call (carry .nfcarry.tar.xz from `scripts/gpu-carry-ab.sh 2771b2a`).
# nf-ab 2771b2a vs main with A/A and nf-ab exact, step dumps + alternation of NF_CUDA_FLAT / NF_CUDA_KDA_CONV_STEP /
# NF_CUDA_STEP_ARENA, the full GPU tests, the ncu decode table; results in $OUT/res.tgz. Run from the repository root.
exec bash bench/results/2026-12-04-s9/call2.sh "$@"
