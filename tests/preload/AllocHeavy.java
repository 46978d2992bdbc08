// tests/preload/AllocHeavy.java: the JVM check of tests/preload_test.sh
// (tests/preload/programs.sh, check_java).  A JVM mallocs from many threads
// of its own (the JIT compilers, the garbage collector, the reference
// handler that frees direct buffers) besides the program's; this program
// adds native allocations on a pool of worker threads: zlib's Deflater and
// Inflater state, and direct ByteBuffers, which the JVM mallocs and which
// another thread frees once the buffer is collected.  Its output depends
// only on the work, not on the schedule: the tasks' results are combined
// in submission order.
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.zip.DataFormatException;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public final class AllocHeavy {
  private static final int TASKS = 12;
  private static final int THREADS = 6;

  // A map of lists, sorted keys, then deflate/inflate round trips and direct
  // buffers of random sizes; returns a hash of what it saw.
  static long work(int seed) throws DataFormatException {
    Random r = new Random(seed);
    Map<String, List<Integer>> m = new HashMap<>();
    for (int i = 0; i < 40000; i++) {
      m.computeIfAbsent("k" + r.nextInt(4000), k -> new ArrayList<>()).add(i);
    }
    List<String> keys = new ArrayList<>(m.keySet());
    Collections.sort(keys);
    long h = 0;
    for (String k : keys) h = h * 31 + k.hashCode() + m.get(k).size();
    for (int i = 0; i < 150; i++) {
      byte[] in = new byte[1000 + r.nextInt(16000)];
      for (int j = 0; j < in.length; j++) in[j] = (byte) (j % 17 + i + (j >> 9));
      Deflater d = new Deflater();
      d.setInput(in);
      d.finish();
      byte[] packed = new byte[in.length + 64];
      int n = d.deflate(packed);
      d.end();
      Inflater inf = new Inflater();
      inf.setInput(packed, 0, n);
      byte[] out = new byte[in.length];
      int got = inf.inflate(out);
      inf.end();
      if (got != in.length || !Arrays.equals(in, out)) {
        throw new IllegalStateException("inflate gave back other bytes");
      }
      ByteBuffer bb = ByteBuffer.allocateDirect(1024 + r.nextInt(32768));
      for (int j = 0; j < bb.capacity(); j += 256) bb.put(j, (byte) (j >> 8));
      h = h * 31 + n + bb.get(bb.capacity() / 2 & ~255);
    }
    return h;
  }

  public static void main(String[] args) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(THREADS);
    List<Future<Long>> results = new ArrayList<>();
    for (int t = 0; t < TASKS; t++) {
      final int seed = t;
      results.add(pool.submit(() -> work(seed)));
    }
    long sum = 0;
    for (Future<Long> f : results) sum = sum * 1000003 + f.get();
    pool.shutdown();
    System.gc();
    System.out.println(TASKS + " tasks on " + THREADS + " threads, checksum "
        + Long.toHexString(sum));
  }
}
