// C++ library for the demangling test.
namespace hotpath {
struct Widget {
	int spin(int n);
};
__attribute__((noinline)) int Widget::spin(int n) {
	volatile int v = n;
	return v * 2;
}
}  // namespace hotpath

int widget_entry(int n) {
	hotpath::Widget w;
	return w.spin(n);
}
