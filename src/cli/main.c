#include <stdio.h>
int main(void) { puts("hetserve"); return 0; }
