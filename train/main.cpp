#include <cstdio>
int main() { std::puts("vitddp train: under construction"); return 0; }
