# bash completion for gguf-mount (needs the bash-completion package: _init_completion, _filedir).
# The options of each command come from the options the installed binary declares
# (`gguf-mount --completion-words COMMAND`), not from --help prose: nothing more, nothing stale.
_gguf_mount_options() {
    gguf-mount --completion-words "$1" 2>/dev/null
}
_gguf_mount() {
    local cur prev words cword
    _init_completion || return
    local sub="" cmd=mount
    [ "${#words[@]}" -gt 1 ] && sub="${words[1]}"
    case "$sub" in
        split|merge|check|prefetch|cache|mount|umount|unmount) cmd=$sub ;;
    esac
    # Values of options.
    case "$prev" in
        --log-level)
            COMPREPLY=($(compgen -W "trace debug info warn error critical off" -- "$cur")); return ;;
        --cache-dir)
            _filedir -d; return ;;
        --ca-cert|--source-file|--chat-template-file|--log-file)
            _filedir; return ;;
        --split-max-tensors|--split-max-size|--net-timeout|--revalidate|--readahead-kb|--cache-max-size|--max-size|--override-kv|--remove-kv|--endpoint-url|--region|--profile)
            return ;;
        -o)
            COMPREPLY=($(compgen -W "allow_other nonempty ro cache_dir= log_file= log_level= offline revalidate= net_timeout= plain_http" -- "$cur")); return ;;
    esac
    if [ "$cword" -eq 1 ]; then
        COMPREPLY=($(compgen -W "$(gguf-mount --completion-words 2>/dev/null) --help --version oci:// ollama://" -- "$cur"))
        [[ "$cur" != -* ]] && _filedir -d
        return
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_gguf_mount_options "$cmd")" -- "$cur"))
        return
    fi
    case "$cmd" in
        cache)
            [ "$cword" -eq 2 ] && COMPREPLY=($(compgen -W "list trim clear" -- "$cur"))
            ;;
        umount|unmount)
            # gguf-mount mounts only (mountinfo's mount point, octal escapes left as they are).
            COMPREPLY=($(compgen -W "$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "fuse.gguf-mount") print $5; break }}' /proc/self/mountinfo 2>/dev/null)" -- "$cur"))
            ;;
        *)
            _filedir
            ;;
    esac
}
complete -F _gguf_mount gguf-mount
