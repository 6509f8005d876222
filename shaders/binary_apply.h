// out = op(x, y) of BinaryOp's ops, for binary.comp and binary_flat.comp (spec constant op):
//   0 add 1 sub 2 mul 3 div 4 max 5 min 6 pow 7 rsub 8 rdiv 9 rpow 10 atan2 11 ratan2
// max and min are ncnn's std::max(x, y) / std::min(x, y): NaN only when x is NaN.
// Needs std_minmax.h.
float apply(float x, float y) {
    if (op == 0) return x + y;
    if (op == 1) return x - y;
    if (op == 2) return x * y;
    if (op == 3) return x / y;
    if (op == 4) return std_max(x, y);
    if (op == 5) return std_min(x, y);
    if (op == 6) return pow(x, y);
    if (op == 7) return y - x;
    if (op == 8) return y / x;
    if (op == 9) return pow(y, x);
    if (op == 10) return atan(x, y);
    if (op == 11) return atan(y, x);
    return x;
}
