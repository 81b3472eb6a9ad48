// A program whose functions the compiler inlines into one another at -O2:
// leaf into middle into shop::outer (forced), and std::map's search and
// std::vector's iteration into shop::outer. TestInlinedCallsMatchLLVMSymbolizer
// compares the inline chain of each of its addresses with llvm-symbolizer's.
#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

namespace shop {
static inline __attribute__((always_inline)) int leaf(int x) {
	return x * 7 + (x >> 3);
}

static inline __attribute__((always_inline)) int middle(int x) {
	int y = leaf(x);
	return y ^ leaf(y + 1);
}

__attribute__((noinline)) long outer(const std::vector<int> &v, std::map<int, int> &m) {
	long s = 0;
	for (int x : v) {
		s += middle(x);
		auto it = m.find(x & 255);
		if (it != m.end())
			s += it->second;
	}
	return s;
}
} // namespace shop

int main(int argc, char **) {
	std::vector<int> v;
	std::map<int, int> m;
	for (int i = 0; i < 1000; i++) {
		v.push_back(i * argc);
		m[i] = i;
	}
	std::sort(v.begin(), v.end());
	long s = 0;
	for (int r = 0; r < 100; r++)
		s += shop::outer(v, m);
	printf("%ld\n", s);
}
