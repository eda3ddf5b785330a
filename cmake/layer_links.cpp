// Linked with every object of one layer of the library and nothing above it (CMakeLists.txt):
// a layer that calls into a higher one fails to link.
int main() { return 0; }
