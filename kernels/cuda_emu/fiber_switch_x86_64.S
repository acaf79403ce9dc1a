// pb_emu: the context switch between fibers (emulated CUDA threads) on x86-64
// (System V). Saves the callee-saved registers, MXCSR and the x87 control word
// on the current stack, stores the stack pointer in *save, and resumes the
// context whose stack pointer is `load`. No signal mask, no system call: a
// switch costs a few nanoseconds, and a block switches at every barrier.
//
//   void pb_emu_switch(void** save /* rdi */, void* load /* rsi */);
//
// A new fiber's stack is laid out by scheduler.cpp (new_fiber_stack) so that the
// first switch to it "returns" into pb_emu_fiber_trampoline with an aligned stack.
    .text
    .globl pb_emu_switch
    .type pb_emu_switch, @function
pb_emu_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size pb_emu_switch, .-pb_emu_switch

    .globl pb_emu_fiber_trampoline
    .type pb_emu_fiber_trampoline, @function
pb_emu_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    xorl %ebp, %ebp
    call pb_emu_fiber_main
    ud2
    .cfi_endproc
    .size pb_emu_fiber_trampoline, .-pb_emu_fiber_trampoline

    .section .note.GNU-stack,"",@progbits
