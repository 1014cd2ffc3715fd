export XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p $OUT
A="--batches 64,256,1024 --vocabs 32000,151936,262144 --families flat,typical,peaked --dtypes float32,bfloat16"
echo "== now ($(git log -1 --format=%h 2>/dev/null))" > $OUT/ab_fp64_now.txt
PYTHONPATH=. python3 benchmarks/lab/ab_fp64_shortlist.py $A >> $OUT/ab_fp64_now.txt 2>&1
(cd .ab/base && PYTHONPATH=. python3 benchmarks/lab/ab_fp64_shortlist.py $A) > $OUT/ab_fp64_base_6a7fb50.txt 2>&1
tail -3 $OUT/ab_fp64_now.txt $OUT/ab_fp64_base_6a7fb50.txt
