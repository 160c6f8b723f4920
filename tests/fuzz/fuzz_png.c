/* Fuzz: the PNG decoder (ops/image.c, hs_image_decode_png, and hs_image_decode, which sniffs the
 * format); the checks are fuzz_image.h's, shared with the other image formats.
 */
#include "fuzz_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_image_run(hs_image_decode_png, data, size);
}
