"""migrate.core.cpustat parsers on /proc texts as the kernel writes them."""


def test_vm_rss_from_proc_status_and_absent_for_a_kernel_thread():
    from migrate.core.cpustat import parse_vm_rss_kib

    assert parse_vm_rss_kib("Name:\tqemu\nVmHWM:\t  900 kB\nVmRSS:\t  812345 kB\nRssAnon:\t1 kB\n") == 812345
    assert parse_vm_rss_kib("Name:\tkthreadd\nState:\tS (sleeping)\n") is None
