# cmake -DIN=<kernel.cu> -DOUT=<kernel.emu.cpp> -P emu_cu.cmake
# Rewrites every launch `k<<<cfg>>>(args` (k possibly a template instance k<D>) as
# `emu_launch(emu_cfg(cfg), k, args` for the CPU emulator (emu.h).
file(READ "${IN}" src)
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*(<[A-Za-z_0-9]+>)?)[ \t\r\n]*<<<([^>]*)>>>\\("
       "emu_launch(emu_cfg(\\3), \\1, " out "${src}")
string(FIND "${out}" "<<<" left)
if(NOT left EQUAL -1)
  message(FATAL_ERROR "emu_cu.cmake: a launch in ${IN} was not rewritten")
endif()
file(WRITE "${OUT}" "${out}")
