# Prints the addresses of the code objects of a function "first" and of
# make, and at a line on stdin frees first's and compiles functions
# "second" until one's code object takes its address (CPython's allocator
# hands out the block freed last first), says "reused", and waits for
# another line.
import sys


def make(name):
    ns = {}
    exec(compile("def %s():\n    return 1\n" % name, "<%s>" % name, "exec"), ns)
    return ns[name].__code__


first = make("first")
addr = id(first)
print(hex(addr), hex(id(make.__code__)), flush=True)
sys.stdin.readline()
del first
keep = []
for _ in range(10000):
    c = make("second")
    if id(c) == addr:
        print("reused", flush=True)
        break
    keep.append(c)
else:
    print("not reused", flush=True)
sys.stdin.readline()
