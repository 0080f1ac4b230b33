# fish completion for dsfs (installed as /usr/share/fish/vendor_completions.d/dsfs.fish).
#
# The same source as the bash completion (completion/dsfs): the subcommands, their flags and the
# mount options are read from dsfs's own --help, so they are those of the dsfs that runs
# (tests/checks/completion_shells_test.sh checks every subcommand is offered).

function __dsfs_help_words
    set -l dsfs (commandline -opc)[1]
    switch "$argv[1]"
        case ''
            $dsfs --help 2>/dev/null | sed -n '/^Subcommands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p'
        case --
            $dsfs --help 2>/dev/null | sed -n 's/^  \(-[^ ]*\).*/\1/p' | tr ',' '\n'
        case -o
            $dsfs mount --help 2>/dev/null | awk '
              /^Mount options/ { on = 1; next }
              on && !/^ / { exit }
              on && /^  [a-z]/ {
                n = split($1, part, ",")
                for (i = 1; i <= n; i++) {
                  name = part[i]; sub(/[[=].*/, "", name)
                  print name (part[i] ~ /^[a-z0-9_]+=/ ? "=" : "")
                }
              }'
        case cache-subcommands
            $dsfs cache --help 2>/dev/null | sed -n '/^Subcommands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p'
        case '*'
            $dsfs $argv --help 2>/dev/null | sed -n 's/^  \(-[^ ]*\).*/\1/p' | tr ',' '\n'
    end
end

# The candidates for the command line being completed.
function __dsfs_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l prev $words[-1]
    set -l cmd
    set -l sub
    set -l skip 0
    for w in $words[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        if test -n "$cmd"
            if test "$cmd" = cache; and test -z "$sub"; and not string match -q -- '-*' $w
                set sub $w
            end
            continue
        end
        switch $w
            case --log-level
                set skip 1
            case '-*'
            case '*'
                set cmd $w
        end
    end
    if test "$prev" = --log-level
        printf '%s\n' trace debug info warn error off
        return
    end
    if test -z "$cmd"
        if string match -q -- '-*' $cur
            __dsfs_help_words --
        else
            __dsfs_help_words ''
        end
        return
    end
    if test "$cmd" = mount; and test "$prev" = -o
        set -l done (string replace -r '[^,]*$' '' -- $cur)
        for o in (__dsfs_help_words -o)
            echo $done$o
        end
        return
    end
    if test "$cmd" = help; and not string match -q -- '-*' $cur
        if test "$prev" = cache
            __dsfs_help_words cache-subcommands
        else if test "$prev" = help
            __dsfs_help_words ''
        end
        return
    end
    if test "$cmd" = cache
        if test -z "$sub"
            if string match -q -- '-*' $cur
                __dsfs_help_words cache
            else
                __dsfs_help_words cache-subcommands
            end
        else if string match -q -- '-*' $cur
            __dsfs_help_words cache $sub
        else if test "$prev" != --keep-days
            __fish_complete_directories $cur
        end
        return
    end
    switch $prev
        case --backend
            printf '%s\n' lmdb rocksdb s3
            return
        case --view
            printf '%s\n' original bmp npy tensor bmp-224 jpeg-224
            return
        case -l --level --dict-size --chunk-size --group-size -j --threads --prefix
            return
    end
    if string match -q -- '-*' $cur
        __dsfs_help_words $cmd
    else if string match -q -- 's3:*' $cur
        return
    else if contains -- $cmd umount stats warmup
        __fish_complete_directories $cur
    else
        __fish_complete_path $cur
    end
end

complete -c dsfs -f -a '(__dsfs_complete)'
