# Renders gguf-mount.1: help2man on the top-level help, plus the --help of each subcommand.
foreach(sub split merge mount check prefetch cache umount)
  execute_process(COMMAND ${BIN} ${sub} --help OUTPUT_VARIABLE help_${sub} ERROR_VARIABLE err RESULT_VARIABLE rc)
  # A backslash in the help text would start a roff escape.
  string(REPLACE "\\" "\\e" help_${sub} "${help_${sub}}")
  # roff takes a line that starts with ' or . as a request and drops it: guard it with \&.
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help_${sub} "${help_${sub}}")
endforeach()
file(READ ${INCLUDE} extra)
set(h2m "${CMAKE_CURRENT_BINARY_DIR}/gguf-mount-sections.h2m")
file(WRITE ${h2m} "${extra}\n[MOUNT]\n.nf\n${help_mount}\n.fi\n[SPLIT]\n.nf\n${help_split}\n.fi\n[MERGE]\n.nf\n${help_merge}\n.fi\n[CHECK]\n.nf\n${help_check}\n.fi\n[PREFETCH]\n.nf\n${help_prefetch}\n.fi\n[CACHE]\n.nf\n${help_cache}\n.fi\n[UMOUNT]\n.nf\n${help_umount}\n.fi\n")
execute_process(COMMAND ${HELP2MAN} --no-info --no-discard-stderr --section=1
                        "--name=mount model directories with split GGUF models merged"
                        --include=${h2m} --output=${OUT} ${BIN}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man failed: ${rc}")
endif()
