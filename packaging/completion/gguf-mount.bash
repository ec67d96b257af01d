# bash completion for gguf-mount
_gguf_mount() {
    local cur prev words cword
    _init_completion || return
    local sub=""
    [ "${#words[@]}" -gt 1 ] && sub="${words[1]}"
    case "$sub" in
        split)
            COMPREPLY=($(compgen -W "--split-max-tensors --split-max-size --no-tensor-first-split --dry-run --quiet --help" -- "$cur"))
            [[ "$cur" != -* ]] && _filedir
            ;;
        merge)
            COMPREPLY=($(compgen -W "--delete-splits --dry-run --quiet --cache-dir --net-timeout --ca-cert --help" -- "$cur"))
            [[ "$cur" != -* ]] && _filedir
            ;;
        prefetch)
            COMPREPLY=($(compgen -W "--cache-dir --net-timeout --ca-cert --quiet --help" -- "$cur"))
            [[ "$prev" == --cache-dir ]] && _filedir -d
            ;;
        check)
            COMPREPLY=($(compgen -W "--json --show-shards --help" -- "$cur"))
            [[ "$cur" != -* ]] && _filedir
            ;;
        *)
            if [ "$cword" -eq 1 ]; then
                COMPREPLY=($(compgen -W "split merge mount check prefetch --help --version" -- "$cur"))
                _filedir -d
            elif [[ "$cur" == -* ]]; then
                COMPREPLY=($(compgen -W "--foreground --debug --single-thread --show-shards --allow-non-empty --verbose --log-level --readahead-kb --cache-dir --cache-max-size --offline --ca-cert --net-timeout --revalidate -o --help --version" -- "$cur"))
            else
                _filedir
            fi
            ;;
    esac
}
complete -F _gguf_mount gguf-mount
